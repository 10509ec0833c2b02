#include <functional>
#include <vector>

#include "planner/optimal.h"

namespace remat::planner {

namespace {
struct Partial {
  Schedule actions;
  std::vector<int> policy;  // [block] (only blocks of the segment set), -1 elsewhere
};
using Family = std::vector<Partial>;

void append(Partial& to, const Partial& from) {
  to.actions.insert(to.actions.end(), from.actions.begin(), from.actions.end());
  for (size_t i = 0; i < to.policy.size(); ++i)
    if (from.policy[i] >= 0) to.policy[i] = from.policy[i];
}
}  // namespace

void enumerate_family(int L, int P, const std::function<void(const Schedule&, const std::vector<int>&)>& visit) {
  // Memoised lists for C(s, t, held) (after the head) and D(s) (before it), as the DP defines them.
  std::vector<Family> C[2];
  C[0].resize(size_t(L + 1) * size_t(L + 1));
  C[1].resize(size_t(L + 1) * size_t(L + 1));
  auto empty = [&]() { return Partial{{}, std::vector<int>(size_t(L), -1)}; };
  std::function<const Family&(int, int, int)> c = [&](int s, int t, int held) -> const Family& {
    Family& f = C[held][size_t(s) * size_t(L + 1) + size_t(t)];
    if (!f.empty()) return f;
    for (int p = 0; p < P; ++p) {
      auto one = [&](const Partial* sub) {
        Partial x = empty();
        x.actions.push_back({Action::Kind::Forward, s, Keep::Internals, true});
        x.policy[size_t(s)] = p;
        if (sub) append(x, *sub);
        x.actions.push_back({Action::Kind::Backward, s, Keep::Nothing, false});
        if (held) x.actions.push_back({Action::Kind::Free, s, Keep::Nothing, false});
        f.push_back(std::move(x));
      };
      if (t - s == 1) one(nullptr);
      else
        for (const Partial& sub : c(s + 1, t, 0)) one(&sub);
    }
    for (int s2 = s + 1; s2 < t; ++s2)
      for (const Partial& a : c(s2, t, 0))
        for (const Partial& b : c(s, s2, 1)) {
          Partial x = empty();
          x.actions.push_back({Action::Kind::Forward, s, held ? Keep::Nothing : Keep::Boundary, true});
          for (int i = s + 1; i < s2; ++i) x.actions.push_back({Action::Kind::Forward, i, Keep::Nothing, true});
          append(x, a);
          append(x, b);
          f.push_back(std::move(x));
        }
    return f;
  };
  std::function<Family(int)> d = [&](int s) -> Family {
    Family f;
    if (s == L) {
      f.push_back(empty());
      return f;
    }
    for (int p = 0; p < P; ++p)
      for (const Partial& sub : d(s + 1)) {
        Partial x = empty();
        x.actions.push_back({Action::Kind::Forward, s, Keep::Internals, false});
        x.policy[size_t(s)] = p;
        append(x, sub);
        x.actions.push_back({Action::Kind::Backward, s, Keep::Nothing, false});
        f.push_back(std::move(x));
      }
    for (int s2 = s + 1; s2 <= L; ++s2) {
      const Family first = d(s2);
      for (const Partial& a : first)
        for (const Partial& b : c(s, s2, 1)) {
          Partial x = empty();
          x.actions.push_back({Action::Kind::Forward, s, Keep::Boundary, false});
          for (int i = s + 1; i < s2; ++i) x.actions.push_back({Action::Kind::Forward, i, Keep::Nothing, false});
          append(x, a);
          append(x, b);
          f.push_back(std::move(x));
        }
    }
    return f;
  };
  for (const Partial& x : d(0)) visit(x.actions, x.policy);
}

}  // namespace remat::planner
