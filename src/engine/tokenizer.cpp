// SentencePiece-style tokenization, following llama.cpp's llm_tokenizer_spm and its special-token
// partition (tokenizer_st_partition) so that ids match.
#include "src/engine/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <list>
#include <queue>

#include "src/engine/gguf.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

const std::string kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space

// Length of the UTF-8 sequence a lead byte announces (continuation bytes count as 1, as in
// llama.cpp's unicode_len_utf8).
size_t utf8_len(unsigned char c) {
  static const size_t lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[c >> 4];
}

std::string escape_spaces(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == ' ') {
      out += kSpace;
    } else {
      out += c;
    }
  }
  return out;
}

struct Symbol {
  int prev, next;
  const char* text;
  size_t n;
};

struct Bigram {
  int left, right;
  float score;
  size_t size;
};

struct BigramOrder {
  // Highest score first; equal scores: leftmost first.
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

}  // namespace

Tokenizer::Tokenizer(const GgufFile& f) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  VQ_CHECK_DATA(model == "llama", fmt::format("{}: tokenizer.ggml.model '{}' is not supported (only 'llama', "
                                              "SentencePiece-style, is)", f.path(), model));
  const GgufArray& toks = f.get_array("tokenizer.ggml.tokens");
  VQ_CHECK_DATA(toks.type == GgufType::kString && !toks.strings.empty(),
                fmt::format("{}: tokenizer.ggml.tokens must be a non-empty string array", f.path()));
  tokens_ = toks.strings;
  const size_t n = tokens_.size();
  scores_.assign(n, 0.0f);
  if (f.has("tokenizer.ggml.scores")) {
    const GgufArray& s = f.get_array("tokenizer.ggml.scores");
    VQ_CHECK_DATA(s.floats.size() == n, fmt::format("{}: tokenizer.ggml.scores has {} entries for {} tokens", f.path(), s.floats.size(), n));
    for (size_t i = 0; i < n; ++i) scores_[i] = float(s.floats[i]);
  }
  types_.assign(n, kNormal);
  if (f.has("tokenizer.ggml.token_type")) {
    const GgufArray& t = f.get_array("tokenizer.ggml.token_type");
    VQ_CHECK_DATA(t.ints.size() == n, fmt::format("{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.path(), t.ints.size(), n));
    for (size_t i = 0; i < n; ++i) types_[i] = int32_t(t.ints[i]);
  }
  index_.reserve(n);
  for (size_t i = 0; i < n; ++i) index_[tokens_[i]] = int32_t(i);  // a repeated text: last id wins
  const auto id_or = [&](const char* key, int32_t fallback) {
    const int64_t v = f.get_int(key, fallback);
    VQ_CHECK_DATA(v >= -1 && v < int64_t(n), fmt::format("{}: {} = {} is not a token id", f.path(), key, v));
    return int32_t(v);
  };
  bos_ = id_or("tokenizer.ggml.bos_token_id", -1);
  eos_ = id_or("tokenizer.ggml.eos_token_id", -1);
  unk_ = id_or("tokenizer.ggml.unknown_token_id", -1);
  eot_ = find("<end_of_turn>");
  add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token", true);
  add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix", true);
  for (int b = 0; b < 256; ++b) byte_tokens_[b] = find(fmt::format("<0x{:02X}>", b));
  for (size_t i = 0; i < n; ++i) {
    if ((types_[i] == kControl || types_[i] == kUserDefined || types_[i] == kUnknown) && !tokens_[i].empty()) {
      special_.push_back(int32_t(i));
    }
  }
  std::stable_sort(special_.begin(), special_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
}

int32_t Tokenizer::find(const std::string& text) const {
  const auto it = index_.find(text);
  return it == index_.end() ? -1 : it->second;
}

bool Tokenizer::is_eog(int32_t id) const { return id == eos_ || (eot_ >= 0 && id == eot_); }

void Tokenizer::encode_spm(const std::string& text, std::vector<int32_t>* out) const {
  std::vector<Symbol> sym;
  for (size_t offs = 0; offs < text.size();) {
    const size_t len = std::min(utf8_len(static_cast<unsigned char>(text[offs])), text.size() - offs);
    sym.push_back({int(sym.size()) - 1, int(sym.size()) + 1, text.data() + offs, len});
    offs += len;
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  const auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string s(sym[left].text, sym[left].n + sym[right].n);
    const int32_t id = find(s);
    if (id < 0) return;
    queue.push({left, right, scores_[size_t(id)], s.size()});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(int(i) - 1, int(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[size_t(b.left)];
    Symbol& r = sym[size_t(b.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // one side already merged away
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int i = 0; i != -1; i = sym[size_t(i)].next) {
    const Symbol& s = sym[size_t(i)];
    const std::string piece(s.text, s.n);
    const int32_t id = find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (unsigned char c : piece) {  // byte fallback
      const int32_t bt = byte_tokens_[c];
      out->push_back(bt >= 0 ? bt : unk_);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_special, bool parse_special) const {
  // Fragments: raw text, or a token already decided. Split around each special token, longest
  // texts first, as llama.cpp does.
  struct Fragment {
    int32_t token;  // -1: raw text
    std::string text;
  };
  std::list<Fragment> frags = {{-1, text}};
  for (int32_t id : special_) {
    if (!parse_special && (types_[id] == kControl || types_[id] == kUnknown)) continue;
    const std::string& st = tokens_[size_t(id)];
    for (auto it = frags.begin(); it != frags.end(); ++it) {
      if (it->token >= 0) continue;
      size_t pos = it->text.find(st);
      if (pos == std::string::npos) continue;
      std::string rest = it->text;
      it = frags.erase(it);
      size_t start = 0;
      while (pos != std::string::npos) {
        if (pos > start) frags.insert(it, {-1, rest.substr(start, pos - start)});
        frags.insert(it, {id, ""});
        start = pos + st.size();
        pos = rest.find(st, start);
      }
      if (start < rest.size()) frags.insert(it, {-1, rest.substr(start)});
      --it;  // continue after the pieces just inserted
    }
  }
  std::vector<int32_t> out;
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  bool prev_special = true;
  for (const Fragment& fr : frags) {
    if (fr.token >= 0) {
      out.push_back(fr.token);
      prev_special = true;
      continue;
    }
    std::string t = (add_space_prefix_ && prev_special) ? " " + fr.text : fr.text;
    encode_spm(escape_spaces(t), &out);
    prev_special = false;
  }
  return out;
}

std::string Tokenizer::piece(int32_t id, bool special) const {
  if (id < 0 || id >= n_vocab()) return "";
  const std::string& t = tokens_[size_t(id)];
  switch (types_[size_t(id)]) {
    case kControl:
    case kUnknown:
      return special ? t : "";
    case kByte: {
      if (t.size() == 6 && t.rfind("<0x", 0) == 0) return std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16)));
      return "";
    }
    case kUserDefined:
      return t;
    default: {
      std::string out;
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, kSpace.size(), kSpace) == 0) {
          out += ' ';
          i += kSpace.size();
        } else {
          out += t[i++];
        }
      }
      return out;
    }
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  std::string s;
  for (int32_t id : ids) s += piece(id, special);
  return s;
}

}  // namespace vq::engine
