// Pre-tokenizer regexes by tokenizer.ggml.pre name, and their application with PCRE2.
// The regex strings and name groups are llama.cpp's (llm_tokenizer_bpe and llama_vocab::impl::load):
// ref: https://github.com/TheTom/llama-cpp-turboquant/blob/69d8e4be47243e83b3d0d71e932bc7aa61c644dc/src/llama-vocab.cpp#L279
// ref: https://github.com/TheTom/llama-cpp-turboquant/blob/69d8e4be47243e83b3d0d71e932bc7aa61c644dc/src/llama-vocab.cpp#L1946
#define PCRE2_CODE_UNIT_WIDTH 8
#include "src/engine/pre_tokenizer.h"

#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>
#include <initializer_list>
#include <iterator>

#include "src/engine/utf8_read.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

// The regex lists, verbatim from llama.cpp (several use its adapted forms: case-insensitive groups
// spelled out, \p{Lu}-style classes it treats as \p{L}).
const char* const kLlama3[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const char* const kJais2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
};
const char* const kDeepseekLlm[] = {
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
};
const char* const kDeepseekCoder[] = {
    "[\r\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}",
};
const char* const kFalcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]",
};
const char* const kStarcoder[] = {
    "\\p{N}",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
const char* const kGpt2[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
const char* const kQwen2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const char* const kQwen35[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const char* const kPoro[] = {
    " ?[^(\\s|.,!?…。，、।۔،)]+",
};
const char* const kViking[] = {
    " ?[^(\\s|.,!?…。，、।۔،)]+",
    "\\p{N}",
};
const char* const kTekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const char* const kChameleon[] = {
    "<sentinel:[0-9]+>",
    "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    "([\\t\\n]|    |  )",
    "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
const char* const kGpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const char* const kBailingMoe[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
};
const char* const kSeedCoder[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const char* const kExaoneMoe[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
};
const char* const kDefault[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};

template <size_t N>
std::vector<std::string> list(const char* const (&regexes)[N]) {
  return std::vector<std::string>(std::begin(regexes), std::end(regexes));
}

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return s == n; });
}

// Names llama.cpp knows whose pre-tokenizers are not implemented here (custom splitters in
// llama.cpp's unicode.cpp, or category quirks of its regex fallback not reproduced).
constexpr std::initializer_list<const char*> kUnsupported = {
    "deepseek-v3", "hunyuan-dense", "joyai-llm", "youtu", "tiny_aya", "superbpe", "kimi-k2", "afmoe", "gemma4"};

constexpr const char* kSupportedList =
    "default, llama3 (llama-bpe, llama-v3, falcon3, falcon-h1, pixtral, midm-2.0, lfm2, jina-v5-nano), "
    "dbrx, smaug-bpe, glm4, chatglm-bpe, jais-2, deepseek-llm, deepseek-coder, falcon, starcoder, refact, "
    "command-r, smollm, codeshell, exaone, minerva-7b, gpt-2, phi-2, jina-es, jina-de, gigachat, jina-v2-es, "
    "jina-v2-de, a.x-4.0, mellum, modern-bert, jina-v1-en, jina-v2-code, roberta-bpe, mpt, olmo, jais, "
    "trillion, granite-docling, exaone4, qwen2, deepseek-r1-qwen, kormo, f2llmv2, megrez, stablelm2, "
    "hunyuan, solar-open, qwen35, poro-chat, bloom, gpt3-finnish, viking, tekken, chameleon, gpt-4o, llama4, "
    "kanana2, minimax-m2, bailingmoe, bailingmoe2, llada-moe, seed-coder, grok-2, exaone-moe";


void append_utf8(uint32_t cpt, std::string* out) {
  if (cpt < 0x80) {
    out->push_back(char(cpt));
  } else if (cpt < 0x800) {
    out->push_back(char(0xC0 | (cpt >> 6)));
    out->push_back(char(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out->push_back(char(0xE0 | (cpt >> 12)));
    out->push_back(char(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cpt & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cpt >> 18)));
    out->push_back(char(0x80 | ((cpt >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cpt & 0x3F)));
  }
}

// Codepoints assigned in Unicode 15.0 and 15.1 with a category the regexes test (L, N, P, S, M):
// llama.cpp's tables are Unicode 15.1, PCRE2 10.42's are 14.0, where these are unassigned.
struct NewRange {
  uint32_t first, last;
  char category;
};
constexpr NewRange kUnicode15[] = {
    {0x00CF3, 0x00CF3, 'M'}, {0x00ECE, 0x00ECE, 'M'}, {0x02FFC, 0x02FFF, 'S'}, {0x031EF, 0x031EF, 'S'},
    {0x10EFD, 0x10EFF, 'M'}, {0x1123F, 0x11240, 'L'}, {0x11241, 0x11241, 'M'}, {0x11B00, 0x11B09, 'P'},
    {0x11F00, 0x11F01, 'M'}, {0x11F02, 0x11F02, 'L'}, {0x11F03, 0x11F03, 'M'}, {0x11F04, 0x11F10, 'L'},
    {0x11F12, 0x11F33, 'L'}, {0x11F34, 0x11F3A, 'M'}, {0x11F3E, 0x11F42, 'M'}, {0x11F43, 0x11F4F, 'P'},
    {0x11F50, 0x11F59, 'N'}, {0x1342F, 0x1342F, 'L'}, {0x13440, 0x13440, 'M'}, {0x13441, 0x13446, 'L'},
    {0x13447, 0x13455, 'M'}, {0x1B132, 0x1B132, 'L'}, {0x1B155, 0x1B155, 'L'}, {0x1D2C0, 0x1D2D3, 'N'},
    {0x1DF25, 0x1DF2A, 'L'}, {0x1E030, 0x1E06D, 'L'}, {0x1E08F, 0x1E08F, 'M'}, {0x1E4D0, 0x1E4EB, 'L'},
    {0x1E4EC, 0x1E4EF, 'M'}, {0x1E4F0, 0x1E4F9, 'N'}, {0x1F6DC, 0x1F6DC, 'S'}, {0x1F774, 0x1F776, 'S'},
    {0x1F77B, 0x1F77F, 'S'}, {0x1F7D9, 0x1F7D9, 'S'}, {0x1FA75, 0x1FA77, 'S'}, {0x1FA87, 0x1FA88, 'S'},
    {0x1FAAD, 0x1FAAF, 'S'}, {0x1FABB, 0x1FABD, 'S'}, {0x1FABF, 0x1FABF, 'S'}, {0x1FACE, 0x1FACF, 'S'},
    {0x1FADA, 0x1FADB, 'S'}, {0x1FAE8, 0x1FAE8, 'S'}, {0x1FAF7, 0x1FAF8, 'S'}, {0x2B739, 0x2B739, 'L'},
    {0x2EBF0, 0x2EE5D, 'L'}, {0x31350, 0x323AF, 'L'},
};

// A codepoint PCRE2 knows with the same category, for one PCRE2 does not. In the BMP the stand-ins
// stay inside DeepSeek's literal range U+0800-U+4E00 as the originals are; beyond it, both are
// outside every literal range of the regexes above.
uint32_t stand_in(uint32_t cpt) {
  if (cpt < kUnicode15[0].first) return cpt;
  const auto* r = std::upper_bound(std::begin(kUnicode15), std::end(kUnicode15), cpt,
                                   [](uint32_t c, const NewRange& x) { return c < x.first; });
  if (r == std::begin(kUnicode15) || cpt > (r - 1)->last) return cpt;
  const bool bmp = cpt < 0x10000;
  switch ((r - 1)->category) {
    case 'L': return 0x20000;                  // CJK Ext. B, Lo
    case 'N': return 0x1D7CE;                  // mathematical bold digit zero, Nd
    case 'P': return 0x10100;                  // Aegean word separator line, Po
    case 'S': return bmp ? 0x2FF0 : 0x1F600;   // ideographic description character, So; emoji, So
    default: return bmp ? 0x0CBC : 0x1D167;    // Kannada sign nukta, Mn; musical combining, Mn
  }
}

// Non-ASCII White_Space (llama.cpp's unicode_set_whitespace beyond ASCII).
bool is_wide_space(uint32_t c) {
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

BpePreConfig bpe_pre_config(const std::string& pre, const std::string& path) {
  BpePreConfig c;
  const auto set = [&](const char* type, std::vector<std::string> regexes) {
    c.type = type;
    c.regexes = std::move(regexes);
  };
  if (pre.empty() || pre == "default") {
    set("default", list(kDefault));
  } else if (one_of(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                          "jina-v5-nano"})) {
    set("llama3", list(kLlama3));
    c.ignore_merges = true;
    c.add_bos = true;
  } else if (pre == "dbrx" || pre == "smaug-bpe") {
    set(pre == "dbrx" ? "dbrx" : "smaug", list(kLlama3));
  } else if (pre == "glm4" || pre == "chatglm-bpe") {
    set("chatglm4", list(kLlama3));
    c.no_bos = true;
  } else if (pre == "jais-2") {
    set("jais2", list(kJais2));
  } else if (pre == "deepseek-llm") {
    set("deepseek-llm", list(kDeepseekLlm));
  } else if (pre == "deepseek-coder") {
    set("deepseek-coder", list(kDeepseekCoder));
  } else if (pre == "falcon") {
    set("falcon", list(kFalcon));
  } else if (one_of(pre, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) {
    set("starcoder", list(kStarcoder));
  } else if (one_of(pre, {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
                          "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais",
                          "trillion", "granite-docling", "exaone4"})) {
    set("gpt2", list(kGpt2));
  } else if (one_of(pre, {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                          "solar-open", "grok-2"})) {
    set("qwen2", list(kQwen2));
  } else if (pre == "qwen35") {
    set("qwen35", list(kQwen35));
  } else if (one_of(pre, {"poro-chat", "bloom", "gpt3-finnish"})) {
    set("bloom", list(kPoro));
  } else if (pre == "viking") {
    set("viking", list(kViking));
  } else if (pre == "tekken") {
    set("tekken", list(kTekken));
    c.ignore_merges = true;
    c.add_bos = true;
  } else if (pre == "chameleon") {
    set("chameleon", list(kChameleon));
    c.add_bos = true;
  } else if (one_of(pre, {"gpt-4o", "llama4", "kanana2", "minimax-m2"})) {
    set("gpt-4o", list(kGpt4o));
  } else if (one_of(pre, {"bailingmoe", "bailingmoe2", "llada-moe"})) {
    set("bailingmoe", list(kBailingMoe));
  } else if (pre == "seed-coder") {
    set("seed-coder", list(kSeedCoder));
  } else if (pre == "exaone-moe") {
    set("exaone-moe", list(kExaoneMoe));
  } else if (one_of(pre, kUnsupported)) {
    throw_error(ErrorKind::kData, fmt::format("{}: tokenizer.ggml.pre '{}' is not supported (supported: {})", path,
                                              pre, kSupportedList));
  } else {
    throw_error(ErrorKind::kData, fmt::format("{}: unknown tokenizer.ggml.pre '{}' (llama.cpp rejects it too; "
                                              "supported: {})", path, pre, kSupportedList));
  }
  return c;
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes) {
  for (const std::string& r : regexes) {
    auto re = std::make_unique<Regex>();
    int err = 0;
    PCRE2_SIZE at = 0;
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(r.data()), r.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &at, nullptr);
    if (re->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      throw_error(ErrorKind::kInternal, fmt::format("pre-tokenizer regex '{}' does not compile at offset {}: {}", r,
                                                    at, reinterpret_cast<const char*>(msg)));
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // where JIT is unavailable, pcre2_match interprets
    regexes_.push_back(std::move(re));
  }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::string* repaired, std::vector<uint32_t>* word_ends) const {
  repaired->clear();
  word_ends->clear();
  if (text.empty()) return;
  VQ_CHECK(text.size() < (size_t(1) << 30), fmt::format("pre-tokenizer: text of {} bytes is too long (1 GiB at most)", text.size()));
  // The text as llama.cpp re-encodes it, and the text PCRE2 matches: the same characters but
  // for the substitutions below, with match_to_repaired mapping offsets back.
  repaired->reserve(text.size() + 16);
  std::string match_text;
  std::vector<uint32_t> match_to_repaired;
  bool substituted = false;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    uint32_t cpt = read_cpt(s + i, text.size() - i, &len);
    i += len;
    if (cpt > 0x10FFFF) cpt = 0xFFFD;  // llama.cpp throws on re-encoding these
    const size_t at = repaired->size();
    append_utf8(cpt, repaired);
    uint32_t as = cpt;
    if (is_wide_space(cpt)) {
      as = 0x0B;  // as llama.cpp: every regex sees non-ASCII whitespace as a vertical tab
    } else if (cpt >= 0xD800 && cpt <= 0xDFFF) {
      as = 0xE000;  // surrogate (Cs), which PCRE2 cannot hold -> private use (Co)
    } else if (cpt == 0x180E) {
      as = 0x200B;  // a Cf that PCRE2 counts as \s -> a Cf that it does not
    } else {
      as = stand_in(cpt);  // assigned after Unicode 14.0
    }
    if (as != cpt && !substituted) {
      substituted = true;
      match_text.assign(*repaired, 0, at);
      match_to_repaired.resize(at);
      for (uint32_t k = 0; k < at; ++k) match_to_repaired[k] = k;
    }
    if (substituted) {
      append_utf8(as, &match_text);
      match_to_repaired.resize(match_text.size(), uint32_t(at));
    }
  }
  if (substituted) match_to_repaired.push_back(uint32_t(repaired->size()));
  const std::string& subject = substituted ? match_text : *repaired;

  std::vector<uint32_t> ends = {uint32_t(subject.size())};
  std::vector<uint32_t> next;
  pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  if (jit_stack != nullptr) pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  const auto release = [&] {
    pcre2_match_data_free(md);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(mctx);
  };
  for (const auto& re : regexes_) {
    next.clear();
    uint32_t start = 0;
    for (uint32_t end : ends) {
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data() + start);
      const size_t len = end - start;
      size_t pos = 0, prev = 0;
      uint32_t opts = 0;
      while (pos <= len) {
        const int rc = pcre2_match(re->code, subj, len, pos, opts | PCRE2_NO_UTF_CHECK, md, mctx);
        if (rc == PCRE2_ERROR_NOMATCH) {
          if (opts == 0 || pos >= len) break;
          // An empty match was found here before: go on one character further, as
          // std::regex_iterator does.
          opts = 0;
          size_t l = 0;
          read_cpt(subj + pos, len - pos, &l);
          pos += l;
          continue;
        }
        if (rc < 0) {
          release();
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof(msg));
          throw_error(ErrorKind::kInternal, fmt::format("pre-tokenizer regex failed: {}", reinterpret_cast<const char*>(msg)));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms = ov[0], me = ov[1];
        if (ms > prev) next.push_back(start + uint32_t(ms));  // the text before the match is a piece
        if (me > ms) next.push_back(start + uint32_t(me));
        prev = me;
        pos = me;
        opts = me == ms ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
      }
      if (prev < len) next.push_back(end);
      start = end;
    }
    ends.swap(next);
  }
  release();
  word_ends->resize(ends.size());
  for (size_t k = 0; k < ends.size(); ++k) (*word_ends)[k] = substituted ? match_to_repaired[ends[k]] : ends[k];
}

}  // namespace vq::engine
