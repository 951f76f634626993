// A framed file: 8-byte magic, u32 version, u64 payload size, the payload, and a CRC-32 (zlib)
// of everything before it. Written to a temporary file that is renamed into place, so a crash
// never leaves a half-written file under the real name; read back only after the magic,
// version, size and checksum all agree, so a damaged, truncated or foreign file is refused
// before any of its payload is interpreted. CRC-32 detects every single-byte change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vq {

void write_checked_file(const std::string& path, const char (&magic)[9], uint32_t version,
                        const std::vector<uint8_t>& payload);

// Throws vq::Error (kUsage, one line) when write_checked_file could not create `path`'s temporary
// file, so that a long computation whose result goes there is refused before it runs.
void check_checked_file_writable(const std::string& path);

// Throws vq::Error: kUsage when the file cannot be opened, kData when it is not a valid file of
// this kind (the message names the path and what is wrong).
std::vector<uint8_t> read_checked_file(const std::string& path, const char (&magic)[9], uint32_t version);
// The same for a kind of file with several versions: any in [min_version, max_version], the one read
// stored in *version.
std::vector<uint8_t> read_checked_file(const std::string& path, const char (&magic)[9], uint32_t min_version,
                                       uint32_t max_version, uint32_t* version);

}  // namespace vq
