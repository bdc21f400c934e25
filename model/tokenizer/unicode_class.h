// Character classes of the pre-tokenizer regexes: \p{L} (general category L*), \p{N} (N*),
// \p{M} (M*), \p{P} (P*) and \s (the Unicode White_Space property, as Oniguruma's \s in HF
// tokenizers). Tables are generated from the Unicode Character Database (14.0) by
// gen_unicode_tables.py.
//
// Pure functions; thread-safe.
#pragma once

namespace tandem {

bool IsUnicodeLetter(char32_t cp);
bool IsUnicodeNumber(char32_t cp);
bool IsUnicodeMark(char32_t cp);
bool IsUnicodePunctuation(char32_t cp);
bool IsUnicodeWhitespace(char32_t cp);
// The letters of DeepSeek LLM's pre-tokenizer regex (not a Unicode class; see the table).
bool IsDeepseekLlmLetter(char32_t cp);

}  // namespace tandem
