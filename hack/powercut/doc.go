// Package powercut is a FUSE filesystem for crash tests that simulates a
// power cut. kill -9 leaves the operating system's page cache alone, so a
// program that forgets an fsync survives it; a power cut does not forgive
// that. This filesystem passes everything through to a backing directory
// (the "page cache") and keeps, per file, the content as of the last
// fsync or fdatasync (the "disk"); Cut throws away every write made since,
// as losing power would.
//
// The model, and what it leaves out:
//   - fsync and fdatasync are the same here: both make a file's content and
//     size durable. Writes are tracked as byte ranges, so a sync copies only
//     what changed since the last one.
//   - A file created through the filesystem and never synced comes back
//     empty (size 0), as on ext4 with data=ordered, where the creation is
//     journaled but the data is not.
//   - Namespace changes (create, unlink, rename, mkdir) are durable at
//     once: the model is of file data. A program that relies on a rename
//     without syncing the directory is not caught.
//   - Files that existed in the backing directory before New count as
//     durable as they are.
//   - Cut drops every unsynced write. A real disk may also keep some of
//     them, in any order, or tear a write in two; those in-between states
//     are not explored here.
//   - The durable copies are kept in memory: it is meant for test
//     databases of megabytes, not gigabytes.
//
// Files are not opened with direct I/O, so mmap works (bbolt reads its
// file through mmap and writes it with pwrite and fdatasync), and FUSE
// passthrough is never offered to the kernel: every write must reach the
// filesystem to be tracked.
//
// It is built for 64-bit Linux only (amd64, arm64): go-fuse v2.12.1's
// splice package does not compile for 32-bit Linux, and FUSE is a Linux
// kernel interface here.
package powercut
