// Byte-level BPE encoding (see tokenizer_bpe.h).
#include "src/engine/tokenizer_bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <queue>

#include "src/engine/utf8_read.h"

namespace vq::engine {
namespace {

// Length of the UTF-8 sequence a lead byte announces (continuation bytes count as 1), as
// llama.cpp's unicode_len_utf8.
size_t utf8_len(unsigned char c) {
  static const size_t lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[c >> 4];
}

std::string utf8(uint32_t cpt) {
  std::string s;
  if (cpt < 0x80) {
    s += char(cpt);
  } else if (cpt < 0x800) {
    s += char(0xC0 | (cpt >> 6));
    s += char(0x80 | (cpt & 0x3F));
  } else if (cpt < 0x10000) {
    s += char(0xE0 | (cpt >> 12));
    s += char(0x80 | ((cpt >> 6) & 0x3F));
    s += char(0x80 | (cpt & 0x3F));
  } else {
    s += char(0xF0 | (cpt >> 18));
    s += char(0x80 | ((cpt >> 12) & 0x3F));
    s += char(0x80 | ((cpt >> 6) & 0x3F));
    s += char(0x80 | (cpt & 0x3F));
  }
  return s;
}

// GPT-2's byte alphabet: the codepoint standing for each byte.
std::array<uint32_t, 256> byte_codepoints() {
  std::array<uint32_t, 256> cp{};
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? b : 256 + n++;
  }
  return cp;
}

struct ByteAlphabet {
  std::array<std::string, 256> chars;
  std::array<int16_t, 324> byte_of;  // codepoint (< 256 + 68) -> byte, or -1
  ByteAlphabet() {
    byte_of.fill(-1);
    const auto cp = byte_codepoints();
    for (int b = 0; b < 256; ++b) {
      chars[size_t(b)] = utf8(cp[size_t(b)]);
      byte_of[cp[size_t(b)]] = int16_t(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}


uint64_t pair_key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }

struct Symbol {
  uint32_t off, n;   // bytes of the word; n = 0 once merged into its left neighbour
  int32_t prev, next;
  int32_t part;      // number of the text as a merge side, or -1
};

struct Bigram {
  int32_t rank;
  int32_t left, right;
  uint32_t size;  // bytes of left + right when queued: a merge since then changes it
};

struct BigramOrder {
  // Lowest rank first; equal ranks: leftmost first.
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

const std::string& BpeEncoder::byte_char(uint8_t b) { return alphabet().chars[b]; }

std::string BpeEncoder::decode_text(std::string_view text) {
  const ByteAlphabet& a = alphabet();
  std::string out;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    uint32_t cpt = read_cpt(s + i, text.size() - i, &len);
    i += len;
    if (cpt < a.byte_of.size() && a.byte_of[cpt] >= 0) {
      out += char(a.byte_of[cpt]);
      continue;
    }
    if (cpt > 0x10FFFF) cpt = 0xFFFD;
    out += "[UNK_BYTE_0x";
    for (char c : utf8(cpt)) out += fmt::format("{:02x}", uint8_t(c));
    out += text;
    out += "]";
  }
  return out;
}

BpeEncoder::BpeEncoder(const std::vector<std::string>& merges, const BpePreConfig& pre)
    : pre_(pre.regexes), ignore_merges_(pre.ignore_merges) {
  const auto intern = [&](std::string_view s) {
    const auto it = parts_.find(s);
    if (it != parts_.end()) return it->second;
    const int32_t id = int32_t(parts_.size());
    parts_.emplace(std::string(s), id);
    return id;
  };
  ranks_.reserve(merges.size());
  merged_.assign(merges.size(), -1);
  std::vector<std::pair<int32_t, int32_t>> sides(merges.size(), {-1, -1});
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) continue;  // llama.cpp files it under ("", ""), which never matches
    const int32_t l = intern(std::string_view(m).substr(0, sp));
    const int32_t r = intern(std::string_view(m).substr(sp + 1));
    if (ranks_.emplace(pair_key(l, r), int32_t(rank)).second) sides[rank] = {l, r};
  }
  // The merged text of each rank, numbered only if it is itself a side of some merge (otherwise
  // it can never merge again).
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    if (sides[rank].first < 0) continue;
    const std::string& m = merges[rank];
    const size_t sp = m.find(' ', 1);
    joined.assign(m, 0, sp);
    joined.append(m, sp + 1, std::string::npos);
    merged_[rank] = part(joined);
  }
}

int32_t BpeEncoder::part(std::string_view s) const {
  const auto it = parts_.find(s);
  return it == parts_.end() ? -1 : it->second;
}

void BpeEncoder::encode_word(std::string_view w, const TokenIndex& vocab, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    const auto it = vocab.find(w);
    if (it != vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> sym;
  for (uint32_t off = 0; off < w.size();) {
    const uint32_t n = uint32_t(std::min(utf8_len(static_cast<unsigned char>(w[off])), w.size() - off));
    sym.push_back({off, n, int32_t(sym.size()) - 1, int32_t(sym.size()) + 1, part(w.substr(off, n))});
    off += n;
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  const auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const Symbol& a = sym[size_t(l)];
    const Symbol& b = sym[size_t(r)];
    if (a.part < 0 || b.part < 0) return;
    const auto it = ranks_.find(pair_key(a.part, b.part));
    if (it == ranks_.end()) return;
    queue.push({it->second, l, r, a.n + b.n});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(int32_t(i) - 1, int32_t(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[size_t(b.left)];
    Symbol& r = sym[size_t(b.right)];
    // Stale: a side was merged away, or grew (sides only grow, so the sum tells).
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    l.part = merged_[size_t(b.rank)];
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = 0; i != -1; i = sym[size_t(i)].next) {
    const std::string_view piece = w.substr(sym[size_t(i)].off, sym[size_t(i)].n);
    const auto it = vocab.find(piece);
    if (it != vocab.end()) {
      out->push_back(it->second);
      continue;
    }
    for (size_t k = 0; k < piece.size(); ++k) {  // each byte of the (encoded) text on its own
      const auto bt = vocab.find(piece.substr(k, 1));
      if (bt != vocab.end()) out->push_back(bt->second);
    }
  }
}

void BpeEncoder::encode(std::string_view text, const TokenIndex& vocab, std::vector<int32_t>* out,
                        Cache* cache) const {
  std::string repaired;
  std::vector<uint32_t> ends;
  pre_.split(text, &repaired, &ends);
  uint32_t start = 0;
  for (uint32_t end : ends) {
    const std::string_view word(repaired.data() + start, end - start);
    start = end;
    const auto hit = cache->where.find(word);
    if (hit != cache->where.end()) {
      const auto [at, count] = hit->second;
      out->insert(out->end(), cache->ids.begin() + at, cache->ids.begin() + at + count);
      continue;
    }
    std::string& enc = cache->scratch;
    enc.clear();
    for (char c : word) enc += byte_char(static_cast<uint8_t>(c));
    const size_t before = out->size();
    encode_word(enc, vocab, out);
    const uint32_t at = uint32_t(cache->ids.size());
    cache->ids.insert(cache->ids.end(), out->begin() + ptrdiff_t(before), out->end());
    cache->where.emplace(std::string(word), std::make_pair(at, uint32_t(out->size() - before)));
  }
}

}  // namespace vq::engine
