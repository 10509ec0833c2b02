// The precompiled header of the engine's libraries (CMakeLists.txt): nlohmann-json and the standard
// headers most of src/ includes, parsed once per build instead of once per file. Every file still
// includes what it uses.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>
