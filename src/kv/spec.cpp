// Spec strings: `name[:key=value,...]` or `k=SPEC,v=SPEC`. Every error names the whole spec and
// the part that is wrong; the canonical form lists non-default parameters in declared order.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <set>

#include "src/kv/registry.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/method.h"

namespace vq::kv {
namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string format_value(const ParamInfo& p, double v) {
  if (p.type == ParamType::kFloat) return fmt::format("{:g}", v);
  if (p.type == ParamType::kChoice) return p.choices.at(size_t(v));
  return fmt::format("{}", int64_t(v));
}

double parse_value(const std::string& whole, const ParamInfo& p, const std::string& text) {
  const auto bad = [&](const char* what) {
    throw_error(ErrorKind::kUsage,
                fmt::format("bad KV spec '{}': {}={} is not {}", whole, p.name, text, what));
  };
  if (text.empty()) bad(p.type == ParamType::kFloat ? "a number" : "an integer");
  double v = 0;
  if (p.type == ParamType::kChoice) {
    for (size_t i = 0; i < p.choices.size(); ++i) {
      if (p.choices[i] == text) return double(i);
    }
    // A choice's position is accepted too (specs written while the parameter was a number still
    // parse, and mean the same); the canonical form names it.
    if (text.size() == 1 && text[0] >= '0' && size_t(text[0] - '0') < p.choices.size()) return double(text[0] - '0');
    std::string names;
    for (const auto& c : p.choices) names += (names.empty() ? "" : ", ") + c;
    throw_error(ErrorKind::kUsage, fmt::format("bad KV spec '{}': {}={} is not one of: {}", whole, p.name, text, names));
  }
  if (p.type == ParamType::kBool && (text == "true" || text == "false")) {
    v = text == "true" ? 1 : 0;
  } else {
    char* end = nullptr;
    if (p.type == ParamType::kFloat) {
      v = std::strtod(text.c_str(), &end);
      if (*end || !std::isfinite(v)) bad("a number");
    } else {
      const long long i = std::strtoll(text.c_str(), &end, 10);
      if (*end) bad(p.type == ParamType::kBool ? "0 or 1" : "an integer");
      v = double(i);
    }
  }
  if (v < p.min || v > p.max) {
    throw_error(ErrorKind::kUsage,
                fmt::format("bad KV spec '{}': {}={} is out of range [{}, {}]", whole, p.name,
                            text, format_value(p, p.min), format_value(p, p.max)));
  }
  return v;
}

struct ParsedSide {
  std::string canonical;
  std::shared_ptr<const MethodImpl> impl;
};

ParsedSide parse_side(const std::string& whole, const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const MethodDef* def = nullptr;
  std::vector<std::string> known;
  for (const MethodDef* d : registered_methods()) {
    known.push_back(d->info.name);
    if (d->info.name == name) def = d;
  }
  if (!def) {
    throw_error(ErrorKind::kUsage, fmt::format("bad KV spec '{}': unknown method '{}' (known: {})",
                                               whole, name, join_names(known)));
  }
  ParamValues values;
  for (const auto& p : def->info.params) values[p.name] = p.default_value;
  std::set<std::string> seen;
  if (colon != std::string::npos) {
    const std::string rest = spec.substr(colon + 1);
    size_t start = 0;
    while (start <= rest.size()) {
      const size_t comma = rest.find(',', start);
      const std::string item =
          rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const size_t eq = item.find('=');
      if (item.empty() || eq == std::string::npos) {
        throw_error(ErrorKind::kUsage,
                    fmt::format("bad KV spec '{}': expected key=value, got '{}'", whole, item));
      }
      const std::string key = item.substr(0, eq), text = item.substr(eq + 1);
      const ParamInfo* info = nullptr;
      std::vector<std::string> names;
      for (const auto& p : def->info.params) {
        names.push_back(p.name);
        if (p.name == key) info = &p;
      }
      if (!info) {
        throw_error(ErrorKind::kUsage,
                    fmt::format("bad KV spec '{}': method '{}' has no parameter '{}' (it has: {})",
                                whole, name, key, names.empty() ? "none" : join_names(names)));
      }
      if (!seen.insert(key).second) {
        throw_error(ErrorKind::kUsage,
                    fmt::format("bad KV spec '{}': parameter '{}' given twice", whole, key));
      }
      values[key] = parse_value(whole, *info, text);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  std::string canonical = name, sep = ":";
  for (const auto& p : def->info.params) {
    if (values[p.name] == p.default_value) continue;
    canonical += sep + p.name + "=" + format_value(p, values[p.name]);
    sep = ",";
  }
  return {canonical, std::shared_ptr<const MethodImpl>(def->make(values))};
}

}  // namespace

Method parse_method(const std::string& spec) {
  if (spec.rfind("k=", 0) == 0) {
    const size_t split = spec.find(",v=");
    if (split == std::string::npos) {
      throw_error(ErrorKind::kUsage,
                  fmt::format("bad KV spec '{}': 'k=SPEC' must be followed by ',v=SPEC'", spec));
    }
    ParsedSide k = parse_side(spec, spec.substr(2, split - 2));
    ParsedSide v = parse_side(spec, spec.substr(split + 3));
    // RateQuant's budget is an average over keys and values together: it cannot be one side.
    for (const std::string* side : {&k.canonical, &v.canonical}) {
      if (side->rfind("ratequant", 0) == 0) {
        throw_error(ErrorKind::kUsage,
                    fmt::format("bad KV spec '{}': ratequant allocates keys and values together and cannot be "
                                "one side of k=SPEC,v=SPEC",
                                spec));
      }
    }
    return Method("k=" + k.canonical + ",v=" + v.canonical, k.impl, v.impl);
  }
  ParsedSide s = parse_side(spec, spec);
  return Method(s.canonical, s.impl, s.impl);
}

std::string canonical_spec(const std::string& spec) {
  try {
    return parse_method(spec).spec();
  } catch (const Error&) {
    return spec;
  }
}

}  // namespace vq::kv
