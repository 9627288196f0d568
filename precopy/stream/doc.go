// Package stream is gmig's migration stream: the framed, versioned and
// checksummed byte format in which a source gmigd sends a vGPU's graphics
// memory and non-memory state to a destination gmigd, over a TCP connection
// or into a file. The normative description, byte for byte, is
// docs/migration-stream.md; every constant here names the section of that
// document it mirrors.
//
// A stream is a 16-byte header (magic "GMIGSTRM", format version, flags)
// followed by sections, each framed as type, flags, length, payload and a
// CRC-32C of everything before the CRC — of a PageBatch, of its headers
// only. The last section is End. A PageBatch section carries graphics
// pages: its record headers (page index, flags, the page's xxhash64), then
// the pages' data, which the destination verifies page by page against
// the hashes; all-zero pages travel as a 16-byte record without data. DeviceState, APILog, FrontEnd and Meta
// sections carry opaque blobs that the caller encodes. A ShardHeader opens
// a shard stream, which carries a share of another stream's stop-phase
// pages (since version 3); readers of one phase's streams can share a claim over
// its pages (SetClaim) so that none arrives twice.
//
// Writer produces a stream and Reader consumes one. A Reader is built with
// Limits and refuses anything beyond them before allocating for it, so a
// hostile or corrupt stream costs at most the memory the limits allow. It
// refuses a wrong magic, an unknown version, an unknown section type, a set
// reserved field, a bad checksum, a page index outside the destination, a
// page whose data does not match its hash, a second DeviceState, data after
// End and a truncated stream; each refusal wraps a sentinel error (ErrMagic,
// ErrVersion, ...) or io.ErrUnexpectedEOF, and names where in the stream it
// happened. A Reader reads pages straight into the destination partition
// as they arrive (with readv on a socket) and checks each there: on any
// error the caller discards the destination (gmig's roll-back does),
// because pages of the failing batch and of earlier batches may already
// be there. With SetWorkers, a Reader
// checks and stores pages on other goroutines while it reads on (batch
// after batch, in stream order), and reports a bad batch at a later Next,
// End's at the latest. SetStored tells the caller which pages each batch
// stored once they are in place and verified, on either path, so that it
// can use them before the stream ends.
//
// Neither Writer nor Reader is safe for concurrent use; each belongs to the
// goroutine that moves one vGPU.
package stream
