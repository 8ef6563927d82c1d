// Package bolt is a persistence.Store in one bbolt file.
//
// Layout (schema version 1, or 2 once it holds a hashed key), one bucket
// each:
//
//	meta       "version" → schema version (uvarint); "walseq" → the last
//	           log record applied (uvarint)
//	messages   message ID (8 bytes big-endian) → message record
//	refs       message ID → reference count (uvarint)
//	retained   topic → message ID (8 bytes big-endian)
//	sessions   session key → session record
//	subs       session key + filter → subscription record
//	out        session key + Seq (8 bytes big-endian) → outbound record
//	rel        session key + packet id (2 bytes big-endian) → nothing
//	wills      session key → will record
//
// A session key is the session ID preceded by its length (uvarint), so
// that a session's entries are contiguous in every bucket, in Seq order
// for "out", and one ID can never be the prefix of another's. The buckets
// are flat rather than a bucket per session because a bbolt bucket that
// holds buckets takes at least a page of its own: about 6 KB per session,
// against under 200 bytes for a session with a subscription here.
//
// bbolt's keys are at most 32 KiB, MQTT's strings up to 64 KiB: a session
// ID longer than 16,000 bytes (maxPlainKey) is keyed by its length and its
// SHA-256, and a filter or topic that long (or starting with byte 0xFF,
// which UTF-8 never does) by 0xFF and its SHA-256; the record then holds
// it whole (codec.go). Before the first batch holding one reaches the
// file or its log, a transaction of its own marks the file schema 2.
//
// Reference counts are kept apart from the messages so that an
// acknowledgement rewrites a few bytes, not the payload: bbolt rewrites a
// whole value to change any of it.
//
// Under Sync, Apply does not commit to bbolt: it writes the batch to a log
// beside the file (path + "-wal") and fdatasyncs that, and a goroutine
// applies the log to the file later, many batches per transaction,
// recording in "meta" ("walseq") the last one applied; Open replays what
// the file lacks. wal.go has the log's format and rules.
//
// Records are varints (encoding/binary) behind a format version byte; the
// 5.0 properties are in the packets codec's wire form (see codec.go).
//
// This package imports mqttd/packets, mqttd/persistence, bbolt and the
// standard library only.
package bolt
