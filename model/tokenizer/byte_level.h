// GPT-2's byte <-> Unicode mapping for byte-level BPE: every byte value gets a printable code
// point so token texts are readable strings. Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to
// the code point of the same value; the other 68 bytes (controls, space, 0x7F..0xA0, 0xAD) map,
// in increasing order, to U+0100, U+0101, ... (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
//
// Pure functions over constant tables; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace tandem {

char32_t ByteToUnicode(uint8_t byte);

// The byte a code point stands for, or -1 when it is not in the mapping's image.
int UnicodeToByte(char32_t cp);

// Raw bytes -> byte-level text (UTF-8 of the mapped code points).
std::string BytesToByteLevel(absl::string_view bytes);

// Byte-level text -> raw bytes. False when `text` holds a code point outside the mapping (then
// `out` is unspecified).
bool ByteLevelToBytes(absl::string_view text, std::string* out);

}  // namespace tandem
