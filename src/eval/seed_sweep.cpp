#include "src/eval/seed_sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "veloxquant/error.h"
#include "veloxquant/kv/method.h"

namespace vq::eval {
namespace {

// One side of a canonical spec, `name[:key=value,...]`, with the values it gives explicitly.
struct Side {
  std::string name;
  std::vector<std::pair<std::string, std::string>> items;
  const kv::MethodDef* def = nullptr;
};

Side split_side(const std::string& text) {
  Side s;
  const size_t colon = text.find(':');
  s.name = text.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string rest = text.substr(colon + 1);
    size_t start = 0;
    while (true) {
      const size_t comma = rest.find(',', start);
      const std::string item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const size_t eq = item.find('=');
      VQ_ASSERT(eq != std::string::npos);  // canonical specs are key=value lists
      s.items.emplace_back(item.substr(0, eq), item.substr(eq + 1));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  for (const kv::MethodDef* d : kv::registered_methods()) {
    if (d->info.name == s.name) s.def = d;
  }
  VQ_ASSERT(s.def != nullptr);  // the spec parsed
  return s;
}

const kv::ParamInfo* find_param(const Side& s, const std::string& key) {
  for (const auto& p : s.def->info.params) {
    if (p.name == key) return &p;
  }
  return nullptr;
}

// The side's value of `p`: explicit in the spec, else its default. Canonical specs write
// integers and switches as integers.
double value_of(const Side& s, const kv::ParamInfo& p) {
  for (const auto& [k, v] : s.items) {
    if (k == p.name) return double(std::strtoll(v.c_str(), nullptr, 10));
  }
  return p.default_value;
}

// Whether the side draws from its seed: it has one, and its rotation switch (if any) is on.
bool draws(const Side& s) {
  if (!find_param(s, "seed")) return false;
  const kv::ParamInfo* rot = find_param(s, "rot");
  return !rot || value_of(s, *rot) != 0;
}

// The side as text, its seed set to `seed` (seed < 0: as it was).
std::string side_text(const Side& s, int64_t seed) {
  std::string out = s.name;
  const char* sep = ":";
  bool put = false;
  for (const auto& [k, v] : s.items) {
    out += sep;
    out += k + "=" + (k == "seed" && seed >= 0 ? std::to_string(seed) : v);
    put = put || k == "seed";
    sep = ",";
  }
  if (!put && seed >= 0) {
    out += sep;
    out += "seed=" + std::to_string(seed);
  }
  return out;
}

}  // namespace

std::vector<SeedVariant> seed_variants(const std::string& spec, int n_seeds) {
  if (n_seeds < 1 || n_seeds > kMaxSeeds) {
    throw_error(ErrorKind::kUsage, fmt::format("--seeds {} is outside [1, {}]", n_seeds, kMaxSeeds));
  }
  const std::string canonical = kv::parse_method(spec).spec();
  // The sides, as the spec parser splits them.
  std::vector<Side> sides;
  const bool split = canonical.rfind("k=", 0) == 0;
  if (split) {
    const size_t at = canonical.find(",v=");
    sides.push_back(split_side(canonical.substr(2, at - 2)));
    sides.push_back(split_side(canonical.substr(at + 3)));
  } else {
    sides.push_back(split_side(canonical));
  }
  std::vector<int64_t> base(sides.size(), -1);
  int64_t first = -1;
  for (size_t i = 0; i < sides.size(); ++i) {
    if (!draws(sides[i])) continue;
    const kv::ParamInfo& p = *find_param(sides[i], "seed");
    base[i] = int64_t(value_of(sides[i], p));
    if (first < 0) first = base[i];
    const int64_t last = base[i] + n_seeds - 1;
    if (double(last) > p.max) {
      throw_error(ErrorKind::kUsage, fmt::format("--seeds {} with '{}': seed {} of '{}' is above the largest, {}",
                                                 n_seeds, spec, last, sides[i].name, int64_t(p.max)));
    }
  }
  if (first < 0) return {SeedVariant{canonical, -1}};
  std::vector<SeedVariant> out;
  for (int r = 0; r < n_seeds; ++r) {
    std::vector<std::string> text;
    for (size_t i = 0; i < sides.size(); ++i) text.push_back(side_text(sides[i], base[i] < 0 ? -1 : base[i] + r));
    const std::string variant = split ? "k=" + text[0] + ",v=" + text[1] : text[0];
    out.push_back(SeedVariant{kv::parse_method(variant).spec(), first + r});
  }
  return out;
}

Spread spread_of(const std::vector<double>& v) {
  VQ_ASSERT(!v.empty());
  Spread s{v[0], 0, v[0]};
  for (double x : v) {
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
    s.mean += x;
  }
  s.mean /= double(v.size());
  return s;
}

}  // namespace vq::eval
