// Package mqttd is an MQTT 3.1, 3.1.1 and 5.0 broker, and the library the
// mqttd command is built on.
//
// # What it owns
//
// The Server and its Options; the connection engine (reading, the single
// writer per connection and its outbox, keepalive); the client registry
// (sessions by client id, takeover); routing (the subscription trie, the
// retained store, delivery); the inline client API (Server.Publish and
// Server.Subscribe); and the broker's statistics (Server.Stats, and the
// Prometheus collector registered on Options.Registerer).
//
// It is the only package that knows goroutines and sockets. The wire codec
// (packets), topic matching (topictrie) and per-client protocol state
// (session) are pure packages it drives; the auth package holds the
// Authenticator and Authorizer interfaces it asks.
//
// # Words
//
// A conn is one network connection: its socket, outbox and reader state.
// A client is the record for a client id, which outlives its connections:
// its session, its latest conn, whether the session is stored. A
// session.Session is the protocol state inside a client: windows, queue,
// packet ids, subscriptions. ARCHITECTURE.md follows a QoS 1 PUBLISH
// through them file by file.
//
// # Where to start reading
//
// ARCHITECTURE.md gives one reading order and the file map; in short:
//
//   - server.go: New, Serve, listeners and the accept loop, Shutdown.
//   - conn.go, conn_read.go, conn_write.go: a connection, its readers
//     (conn_read_linux.go and engine_linux.go for the epoll engine) and
//     its outbox and writer; keepalive.go, conn_answer.go (answers held
//     until their commit), goroutines.go, admission.go.
//   - handle.go and handle_*.go: one file per kind of packet.
//   - registry.go (attach, takeover, detach), route.go, deliver.go,
//     retain.go, message.go, share.go, will.go, expiry.go.
//   - durable.go and restore.go: the store; close.go: why connections
//     end; stats.go and metrics.go: counting.
//   - LOCKING.md gives the lock order.
//
// # What it must not do
//
// No I/O under a lock: frames are appended to an outbox under its mutex
// and written after it is released, by the one goroutine holding the
// outbox's writing role. A publisher never blocks on a subscriber beyond a
// bounded stall. Locks are taken in the order registry, session, outbox,
// never the reverse, and the trie's lock is a leaf. A decoded value never
// aliases a reader's buffer: each frame's body is a copy the packet owns.
// No panic reaches the connection
// loop: a handler that panics closes its connection, counted as
// internal_error. Without a data directory (or Options.Store) New starts
// no goroutine and opens no descriptor; with one it opens the store, and
// the bbolt store starts the applier of its log.
package mqttd
