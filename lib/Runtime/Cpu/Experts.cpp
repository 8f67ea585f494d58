#include "moe/Runtime/Cpu/Kernels.h"
