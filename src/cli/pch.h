// The precompiled header of the `remat` binary (CMakeLists.txt): CLI11 beside the engine's.
#pragma once
#include <CLI/CLI.hpp>

#include "../pch.h"
