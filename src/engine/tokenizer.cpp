// Tokenizer set-up and the SentencePiece-style path, following llama.cpp's llama_vocab::impl::load,
// llm_tokenizer_spm and its special-token partition (tokenizer_st_partition) so that ids match.
// The byte-level BPE path is in tokenizer_bpe.cpp.
#include "src/engine/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <initializer_list>
#include <queue>

#include "src/engine/gguf.h"
#include "src/engine/tokenizer_bpe.h"
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

std::string unescape_spaces(const std::string& t) {
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

// isspace() in the C locale, as llama.cpp's lstrip/rstrip use it.
bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

bool one_of(const std::string& s, std::initializer_list<const char*> texts) {
  return std::any_of(texts.begin(), texts.end(), [&](const char* t) { return s == t; });
}

uint32_t attr_of_type(int64_t type) {
  switch (type) {
    case Tokenizer::kUnknown: return Tokenizer::kAttrUnknown;
    case Tokenizer::kUnused: return Tokenizer::kAttrUnused;
    case Tokenizer::kNormal: return Tokenizer::kAttrNormal;
    case Tokenizer::kControl: return Tokenizer::kAttrControl;
    case Tokenizer::kUserDefined: return Tokenizer::kAttrUserDefined;
    case Tokenizer::kByte: return Tokenizer::kAttrByte;
    default: return 0;  // undefined
  }
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
  VQ_CHECK_DATA(model == "llama" || model == "gpt2",
                fmt::format("{}: tokenizer.ggml.model '{}' is not supported (supported: 'llama' (SentencePiece), "
                            "'gpt2' (byte-level BPE))", f.path(), model));
  const bool bpe = model == "gpt2";
  BpePreConfig pre;
  if (bpe) {
    pre = bpe_pre_config(f.get_string("tokenizer.ggml.pre", ""), f.path());
    VQ_CHECK_DATA(f.has("tokenizer.ggml.merges"), fmt::format("{}: tokenizer.ggml.merges is missing (a 'gpt2' "
                                                              "tokenizer needs its merges)", f.path()));
  }
  const GgufArray& toks = f.get_array("tokenizer.ggml.tokens");
  VQ_CHECK_DATA(toks.type == GgufType::kString && !toks.strings.empty(),
                fmt::format("{}: tokenizer.ggml.tokens must be a non-empty string array", f.path()));
  tokens_ = toks.strings;
  const size_t n = tokens_.size();
  for (size_t i = 0; i < n; ++i) {  // as llama.cpp renames an empty token
    if (tokens_[i].empty()) tokens_[i] = fmt::format("[EMPTY_{}]", i);
  }
  scores_.assign(n, 0.0f);
  if (f.has("tokenizer.ggml.scores")) {
    const GgufArray& s = f.get_array("tokenizer.ggml.scores");
    VQ_CHECK_DATA(s.floats.size() == n, fmt::format("{}: tokenizer.ggml.scores has {} entries for {} tokens", f.path(), s.floats.size(), n));
    for (size_t i = 0; i < n; ++i) scores_[i] = float(s.floats[i]);
  }
  std::vector<int32_t> types(n, kNormal);
  if (f.has("tokenizer.ggml.token_type")) {
    const GgufArray& t = f.get_array("tokenizer.ggml.token_type");
    VQ_CHECK_DATA(t.ints.size() == n, fmt::format("{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.path(), t.ints.size(), n));
    for (size_t i = 0; i < n; ++i) types[i] = int32_t(t.ints[i]);
  }
  attrs_.resize(n);
  for (size_t i = 0; i < n; ++i) attrs_[i] = attr_of_type(types[i]);
  // Filled in id order without reserving, as llama.cpp fills token_to_id, so that iteration orders
  // agree (a repeated text: the last id wins).
  for (size_t i = 0; i < n; ++i) index_[tokens_[i]] = int32_t(i);
  if (bpe) {
    const GgufArray& merges = f.get_array("tokenizer.ggml.merges");
    VQ_CHECK_DATA(merges.type == GgufType::kString || merges.count == 0,
                  fmt::format("{}: tokenizer.ggml.merges must be a string array", f.path()));
    bpe_ = std::make_unique<BpeEncoder>(merges.strings, pre);
  }

  const auto id_or = [&](const char* key, int32_t fallback) {
    const int64_t v = f.get_int(key, fallback);
    VQ_CHECK_DATA(v >= -1 && v < int64_t(n), fmt::format("{}: {} = {} is not a token id", f.path(), key, v));
    return int32_t(v);
  };
  // llama.cpp's defaults: SentencePiece has none here (kept from before); BPE uses 11 for BOS and
  // EOS, none for ChatGLM's BOS.
  const int32_t bpe_default = bpe && n > 11 ? 11 : -1;
  bos_ = id_or("tokenizer.ggml.bos_token_id", bpe && !pre.no_bos ? bpe_default : -1);
  eos_ = id_or("tokenizer.ggml.eos_token_id", bpe ? bpe_default : -1);
  unk_ = id_or("tokenizer.ggml.unknown_token_id", -1);
  eot_ = id_or("tokenizer.ggml.eot_token_id", -1);
  eom_ = id_or("tokenizer.ggml.eom_token_id", -1);
  fim_pre_ = id_or("tokenizer.ggml.fim_pre_token_id", -1);
  fim_suf_ = id_or("tokenizer.ggml.fim_suf_token_id", -1);
  fim_mid_ = id_or("tokenizer.ggml.fim_mid_token_id", -1);
  fim_pre_ = id_or("tokenizer.ggml.prefix_token_id", fim_pre_);  // older names
  fim_suf_ = id_or("tokenizer.ggml.suffix_token_id", fim_suf_);
  fim_mid_ = id_or("tokenizer.ggml.middle_token_id", fim_mid_);
  fim_pad_ = id_or("tokenizer.ggml.fim_pad_token_id", -1);
  fim_rep_ = id_or("tokenizer.ggml.fim_rep_token_id", -1);
  fim_sep_ = id_or("tokenizer.ggml.fim_sep_token_id", -1);
  add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token", bpe ? pre.add_bos : true);
  add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token", false);
  add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix", !bpe);
  for (int b = 0; b < 256; ++b) byte_tokens_[b] = find(fmt::format("<0x{:02X}>", b));
  find_special_tokens(f);

  // Each token's bytes, as llama.cpp's token-to-piece cache holds them.
  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = attrs_[i];
    const std::string& t = tokens_[i];
    if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) {
      pieces_[i] = t;
    } else if (a & kAttrNormal) {
      pieces_[i] = bpe ? BpeEncoder::decode_text(t) : unescape_spaces(t);
    } else if ((a & kAttrByte) && t.size() >= 5) {  // <0xXX>
      pieces_[i] = std::string(1, char(std::strtol(t.substr(3, 2).c_str(), nullptr, 16)));
    }
  }
}

Tokenizer::~Tokenizer() = default;

// Special-token ids llama.cpp finds by text, the end-of-generation set, the attributes it adjusts,
// and the list of tokens split off first, in llama.cpp's order (llama_vocab::impl::load).
void Tokenizer::find_special_tokens(const GgufFile& f) {
  const auto mark_control = [&](int32_t id) { attrs_[size_t(id)] |= kAttrControl; };
  // First match in token_to_id's iteration order, for ids the file did not give.
  for (const auto& entry : index_) {
    const std::string& text = entry.first;  // (a plain reference: clang 14 cannot capture bindings)
    const int32_t id = entry.second;
    const auto detect = [&](int32_t* slot, std::initializer_list<const char*> texts) {
      if (*slot == -1 && one_of(text, texts)) {
        *slot = id;
        mark_control(id);
      }
    };
    detect(&eot_, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                   "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"});
    detect(&eom_, {"<|eom_id|>"});
    detect(&fim_pre_, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                       "<|code_prefix|>", "<|prefix|>"});
    detect(&fim_suf_, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                       "<|code_suffix|>", "<|suffix|>"});
    detect(&fim_mid_, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                       "<|code_middle|>", "<|middle|>"});
    detect(&fim_pad_, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
    detect(&fim_rep_, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
    detect(&fim_sep_, {"<|file_sep|>"});
  }
  // Control tokens named "unused".
  for (const auto& [text, id] : index_) {
    uint32_t& a = attrs_[size_t(id)];
    if ((a & kAttrControl) && text.find("unused") != std::string::npos) a |= kAttrUnused;
  }
  std::vector<int32_t> eog;
  for (int32_t id : {fim_pad_, fim_rep_, fim_sep_}) {
    if (id >= 0) eog.push_back(id);
  }
  for (const auto& [text, id] : index_) {
    if (one_of(text, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                      "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                      "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                      "<｜end▁of▁sentence｜>"})) {
      eog.push_back(id);
      mark_control(id);
    }
  }
  for (const auto& [text, id] : index_) {  // gpt-oss: always rendered
    if (one_of(text, {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) attrs_[size_t(id)] = kAttrUserDefined;
  }
  for (int32_t id : {eos_, eot_, eom_}) {
    if (id >= 0) eog.push_back(id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  const auto eog_with = [&](const char* text) {
    for (int32_t id : eog) {
      if (tokens_[size_t(id)] == text) return id;
    }
    return -1;
  };
  // <|end|> is not an end of generation beside <|return|> and <|call|> (gpt-oss), or <|calls|> and
  // <|flush|> (Solar Open); </s> is not beside <|tool_response> (Gemma 4).
  const int32_t end = eog_with("<|end|>");
  const bool has_call = eog_with("<|call|>") >= 0 || eog_with("<|calls|>") >= 0;
  if (end >= 0 && has_call && (eog_with("<|return|>") >= 0 || eog_with("<|flush|>") >= 0)) {
    eog.erase(std::find(eog.begin(), eog.end(), end));
    attrs_[size_t(end)] = kAttrUserDefined;
  }
  const int32_t s_end = eog_with("</s>");
  if (s_end >= 0 && eog_with("<|tool_response>") >= 0) {
    eog.erase(std::find(eog.begin(), eog.end(), s_end));
    attrs_[size_t(s_end)] = kAttrNormal;
  }
  eog_ = std::move(eog);

  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (attrs_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_.push_back(int32_t(i));
  }
  // std::sort as llama.cpp (not stable), so that equal lengths come in the same order.
  std::sort(special_.begin(), special_.end(),
            [&](int32_t a, int32_t b) { return tokens_[size_t(a)].size() > tokens_[size_t(b)].size(); });

  // Per-model attributes llama.cpp sets by name.
  std::string name = f.get_string("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(), [](char c) { return char(std::tolower(static_cast<unsigned char>(c))); });
  const std::string pre = f.get_string("tokenizer.ggml.pre", "");
  const std::string arch = f.get_string("general.architecture", "");
  const auto contains = [](const std::string& s, std::initializer_list<const char*> parts) {
    return std::any_of(parts.begin(), parts.end(), [&](const char* p) { return s.find(p) != std::string::npos; });
  };
  const auto set_attr = [&](const char* text, uint32_t bit, bool on) {
    const int32_t id = find(text);
    if (id < 0) return;  // llama.cpp would fail to load
    attrs_[size_t(id)] = on ? (attrs_[size_t(id)] | bit) : (attrs_[size_t(id)] & ~bit);
  };
  if (contains(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) || contains(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set_attr("<mask>", kAttrLstrip, true);
  } else if (contains(name, {"phi-3", "phi3"})) {
    for (int32_t id : special_) attrs_[size_t(id)] |= kAttrRstrip;
    set_attr("</s>", kAttrRstrip, true);
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, kAttrRstrip, false);
  } else if (contains(name, {"modern-bert"})) {
    set_attr("[MASK]", kAttrLstrip, true);
  }
}

int32_t Tokenizer::find(const std::string& text) const {
  const auto it = index_.find(text);
  return it == index_.end() ? -1 : it->second;
}

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && std::binary_search(eog_.begin(), eog_.end(), id); }

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

// Splits the text around each special token, longest texts first. Control and unknown tokens
// only with parse_special; user-defined ones always. A token with lstrip/rstrip takes the
// whitespace before/after it.
std::vector<Tokenizer::Fragment> Tokenizer::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags, next;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  for (int32_t id : special_) {
    const uint32_t a = attrs_[size_t(id)];
    if (!parse_special && (a & (kAttrControl | kAttrUnknown))) continue;
    const std::string& st = tokens_[size_t(id)];
    next.clear();
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        next.push_back(fr);
        continue;
      }
      size_t off = fr.off, len = fr.len;
      while (len > 0) {
        const size_t pos = text.substr(0, off + len).find(st, off);
        if (pos == std::string_view::npos) {
          next.push_back({-1, off, len});
          break;
        }
        size_t left = pos - off;
        if (a & kAttrLstrip) {
          while (left > 0 && is_space(text[off + left - 1])) --left;
        }
        if (left > 0) next.push_back({-1, off, left});
        next.push_back({id, 0, 0});
        const size_t end = off + len;
        off = pos + st.size();
        len = end - off;
        if (a & kAttrRstrip) {
          while (len > 0 && is_space(text[off])) {
            ++off;
            --len;
          }
        }
      }
    }
    frags.swap(next);
  }
  return frags;
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_special, bool parse_special) const {
  const std::vector<Fragment> frags = partition(text, parse_special);
  std::vector<int32_t> out;
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  if (bpe_ != nullptr) {
    BpeEncoder::Cache cache;
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        out.push_back(fr.token);
      } else {
        bpe_->encode(std::string_view(text).substr(fr.off, fr.len), index_, &out, &cache);
      }
    }
  } else {
    bool prev_special = true;
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        out.push_back(fr.token);
        prev_special = true;
        continue;
      }
      // Built by appending: GCC 12 warns falsely (-Wrestrict) on " " + substr.
      std::string t = add_space_prefix_ && prev_special ? " " : "";
      t.append(text, fr.off, fr.len);
      encode_spm(escape_spaces(t), &out);
      prev_special = false;
    }
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::string Tokenizer::piece(int32_t id, bool special) const {
  if (id < 0 || id >= n_vocab()) return "";
  if (!special && (attrs_[size_t(id)] & (kAttrUnknown | kAttrControl))) return "";
  return pieces_[size_t(id)];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  std::string s;
  for (int32_t id : ids) s += piece(id, special);
  return s;
}

}  // namespace vq::engine
