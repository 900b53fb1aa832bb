#pragma once
#include "kgen_cpu_shim.h"
