// Package netpoll is the connection engine's view of Linux sockets: one
// epoll instance that reports which descriptors have bytes to read or room
// to write (Poller), and a socket descriptor read and written without
// blocking, whose closing waits for the system calls using it (FD).
//
// It knows nothing of MQTT: the broker gives it descriptors and a Watcher
// for each, and decides what to do when one is ready. On systems other
// than Linux the package is empty and the broker reads every connection
// with a goroutine of its own.
package netpoll
