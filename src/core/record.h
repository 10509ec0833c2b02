// Records: structs that list their fields once, and everything that follows from that one list.
//
// A record is an aggregate with a static member template that hands each field, with its name in
// files, to a visitor:
//
//   struct Point {
//     int64_t x = 0;
//     std::string label;
//     template <class S, class V> static void fields(S& s, V&& v) { v("x", s.x); v("label", s.label); }
//   };
//
// From that list alone come the JSON codec (to_json / from_json: every field written, every field
// required on reading, an unknown key refused), the field-by-field comparison that names each
// difference (diff), and the guard that keeps the list complete: field_count<R>() counts the
// aggregate's members without the list, and a test compares it with listed_fields<R>(), so a member
// added without a codec entry fails (tests/core/test_record.cpp).
//
// A field may be a bool, an integer, a float or double (finite), a std::string, an enum with
// EnumNames (record_fwd.h), a type with a Codec, a nested record, or a std::vector / std::optional of those.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/record_fwd.h"

namespace remat {
struct ModelConfig;
}

namespace remat::record {

// Range checks run on a record once read, beyond what its field types allow: none by default.
template <class T>
void check_limits(const T&, const std::string&) {}
// A model config's sizes and reals, as strictly as the flags that set them (src/model/hf_config.cpp;
// weights.h has the limits). Throws FieldError naming the field.
void check_limits(const ModelConfig& c, const std::string& path);

template <class T>
concept Record = requires(T& t) { T::fields(t, [](const char*, auto&) {}); };
template <class T>
concept Coded = requires(const T& t, const nlohmann::json& j) {
  { Codec<T>::encode(t) } -> std::convertible_to<nlohmann::json>;
  { Codec<T>::decode(j) } -> std::convertible_to<T>;
};

// A field that cannot be read: `path` names it ("model.precision", "schedule[3]").
struct FieldError : std::runtime_error {
  std::string path;
  FieldError(std::string p, const std::string& what) : std::runtime_error(what), path(std::move(p)) {}
};

namespace detail {
template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

inline std::string join(const std::string& prefix, const char* key) { return prefix.empty() ? key : prefix + "." + key; }
inline std::string shown(const nlohmann::json& j) {
  std::string s = j.dump();
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

// Converts to any field type: counts an aggregate's members by brace-initialising it.
// (Not to an optional: that converts through the optional's own constructor, which would be ambiguous.)
struct Any {
  template <class T>
    requires(!is_optional<T>::value)
  constexpr operator T() const;  // never defined: only used unevaluated
};
template <class T, class... A>
constexpr size_t count_members() {
  if constexpr (requires { T{A{}..., Any{}}; })
    return count_members<T, A..., Any>();
  else
    return sizeof...(A);
}
}  // namespace detail

template <class T>
nlohmann::json to_json(const T& v);
template <class T>
void from_json(const nlohmann::json& j, T& out, const std::string& path = "");

template <class T>
nlohmann::json to_json(const T& v) {
  if constexpr (Record<T>) {
    nlohmann::json j = nlohmann::json::object();
    T::fields(v, [&](const char* key, const auto& f) { j[key] = to_json(f); });
    return j;
  } else if constexpr (Coded<T>) {
    return Codec<T>::encode(v);
  } else if constexpr (NamedEnum<T>) {
    return enum_name(v);
  } else if constexpr (detail::is_optional<T>::value) {
    return v ? to_json(*v) : nlohmann::json(nullptr);
  } else if constexpr (detail::is_vector<T>::value) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& x : v) a.push_back(to_json(x));
    return a;
  } else if constexpr (std::is_same_v<T, float>) {
    // As people write it: the shortest decimal that reads back as this float (0.1, not the double
    // 0.10000000149011612 that the float widens to).
    char b[32];
    const auto [end, ec] = std::to_chars(b, b + sizeof b, v);
    return ec == std::errc() ? nlohmann::json(std::strtod(std::string(b, end).c_str(), nullptr)) : nlohmann::json(double(v));
  } else if constexpr (std::is_same_v<T, bool> || std::is_arithmetic_v<T> || std::is_same_v<T, std::string>) {
    return v;
  } else {
    static_assert(sizeof(T) == 0, "record: no codec for this field type");
  }
}

template <class T>
void from_json(const nlohmann::json& j, T& out, const std::string& path) {
  auto bad = [&](const std::string& want) -> FieldError {
    return FieldError(path, "must be " + want + ", got " + detail::shown(j));
  };
  if constexpr (Record<T>) {
    if (!j.is_object()) throw bad("an object");
    size_t known = 0;
    T::fields(out, [&](const char* key, auto& f) {
      const std::string p = detail::join(path, key);
      if (!j.contains(key)) throw FieldError(p, "is missing");
      ++known;
      from_json(j.at(key), f, p);
    });
    if (known != j.size())
      for (const auto& [key, value] : j.items()) {
        bool listed = false;
        T::fields(out, [&](const char* k, auto&) { listed = listed || key == k; });
        if (!listed) throw FieldError(detail::join(path, key.c_str()), "is not a field this remat knows");
      }
    check_limits(out, path);
  } else if constexpr (Coded<T>) {
    try {
      out = Codec<T>::decode(j);
    } catch (const std::invalid_argument& e) {
      throw FieldError(path, e.what());
    }
  } else if constexpr (NamedEnum<T>) {
    const std::optional<T> v = j.is_string() ? parse_enum<T>(j.get<std::string>()) : std::nullopt;
    if (!v) throw bad("one of " + enum_choices<T>());
    out = *v;
  } else if constexpr (detail::is_optional<T>::value) {
    if (j.is_null()) {
      out.reset();
    } else {
      typename T::value_type v{};
      from_json(j, v, path);
      out = std::move(v);
    }
  } else if constexpr (detail::is_vector<T>::value) {
    if (!j.is_array()) throw bad("an array");
    T v;
    for (size_t i = 0; i < j.size(); ++i) {
      typename T::value_type x{};
      from_json(j[i], x, path + "[" + std::to_string(i) + "]");
      v.push_back(std::move(x));
    }
    out = std::move(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) throw bad("true or false");
    out = j.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!j.is_number_integer()) throw bad("an integer");
    if constexpr (std::is_unsigned_v<T>) {
      if (!j.is_number_unsigned() || j.get<uint64_t>() > std::numeric_limits<T>::max()) throw bad("a non-negative integer");
      out = T(j.get<uint64_t>());
    } else {
      const bool fits = j.is_number_unsigned() ? j.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                                               : j.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                                                     j.get<int64_t>() <= int64_t(std::numeric_limits<T>::max());
      if (!fits) throw bad("an integer in range");
      out = T(j.get<int64_t>());
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number() || !std::isfinite(j.get<double>())) throw bad("a finite number");
    const double d = j.get<double>();
    // A double the field's type cannot hold would become infinity (1e300) or be flushed towards 0 (1e-45).
    if (std::fabs(d) > double(std::numeric_limits<T>::max()) ||
        (d != 0 && std::fabs(d) < double(std::numeric_limits<T>::min())))
      throw bad(std::is_same_v<T, float> ? "a number a float holds (0, or 1.2e-38 to 3.4e38 in magnitude)"
                                         : "a number a double holds");
    out = T(d);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) throw bad("a string");
    out = j.get<std::string>();
  } else {
    static_assert(sizeof(T) == 0, "record: no codec for this field type");
  }
}

// A field where two records differ: its path and both values as written in files.
struct Difference {
  std::string path;
  nlohmann::json a, b;
};
// Every field where `a` and `b` differ, nested records field by field, in the order listed.
template <Record R>
std::vector<Difference> diff(const R& a, const R& b, const std::string& prefix = "") {
  std::vector<Difference> out;
  std::vector<std::pair<std::string, nlohmann::json>> left;
  R::fields(a, [&](const char* key, const auto& f) { left.emplace_back(key, to_json(f)); });
  size_t i = 0;
  R::fields(b, [&](const char* key, const auto& f) {
    using F = std::decay_t<decltype(f)>;
    const std::string p = detail::join(prefix, key);
    if constexpr (Record<F>) {
      F fa{};
      from_json(left[i].second, fa, p);
      for (Difference& d : diff(fa, f, p)) out.push_back(std::move(d));
    } else {
      nlohmann::json jb = to_json(f);
      if (jb != left[i].second) out.push_back({p, left[i].second, std::move(jb)});
    }
    ++i;
  });
  return out;
}

// "precision \"bf16\" (plan) vs \"f32\" (this run), seq 64 (plan) vs 128 (this run)".
inline std::string describe(const std::vector<Difference>& d, const std::string& a_name, const std::string& b_name) {
  std::string s;
  for (const Difference& x : d)
    s += (s.empty() ? "" : ", ") + x.path + " " + detail::shown(x.a) + " (" + a_name + ") vs " + detail::shown(x.b) +
         " (" + b_name + ")";
  return s;
}

// How many fields the record lists, and how many members the aggregate has: equal when every member
// is listed.
template <Record R>
size_t listed_fields() {
  R r{};
  size_t n = 0;
  R::fields(r, [&](const char*, auto&) { ++n; });
  return n;
}
template <class R>
constexpr size_t field_count() {
  static_assert(std::is_aggregate_v<R>, "field_count counts an aggregate's members");
  return detail::count_members<R>();
}

}  // namespace remat::record
