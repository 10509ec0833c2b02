// What a record's own header needs (record.h has the codec): an enum's names, declared once beside
// the enum, and a type's own text form. Kept apart from record.h so that low headers (dtype.h,
// schedule.h, model.h) declare them without pulling in JSON.
//  - EnumNames<E>: specialise with `static constexpr std::pair<E, const char*> values[] = {...};`.
//  - Codec<T>: specialise with `static nlohmann::json encode(const T&);` and
//    `static T decode(const nlohmann::json&);` (throws std::invalid_argument saying what is wrong).
#pragma once
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace remat::record {

template <class E>
struct EnumNames;

template <class T>
struct Codec;

template <class T>
concept NamedEnum = std::is_enum_v<T> && requires { EnumNames<T>::values; };

template <NamedEnum E>
const char* enum_name(E e) {
  for (const auto& [v, n] : EnumNames<E>::values)
    if (v == e) return n;
  return "?";
}
// "gpt2, llama"
template <NamedEnum E>
std::string enum_choices() {
  std::string s;
  for (const auto& [v, n] : EnumNames<E>::values) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}
template <NamedEnum E>
std::optional<E> parse_enum(const std::string& name) {
  for (const auto& [v, n] : EnumNames<E>::values)
    if (name == n) return v;
  return std::nullopt;
}

}  // namespace remat::record
