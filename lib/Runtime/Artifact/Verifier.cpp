#include "moe/Runtime/Artifact/Reader.h"
