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
//   - server.go: New, Serve, listeners and the accept loop, Shutdown.
//   - reader.go: dispatch, where every frame from either reader is
//     decoded and handled, and the goroutine reader for connections that
//     expose no descriptor (TLS, WebSocket); reader_linux.go,
//     readerpool_linux.go, poll_linux.go and idle_linux.go: the epoll
//     reader for plain sockets, the bounded pool of its goroutines, its
//     poller and the keepalive wheel.
//   - connect.go (CONNECT), handle.go (every other packet), subscribe.go.
//   - registry.go: clients, attach and takeover, detach, refilling the
//     window from the session queue.
//   - route.go: publish and deliver; message.go: building and encoding
//     messages; outbox.go: the outbox and its writer.
//   - close.go: why connections end; stats.go and metrics.go: counting.
//   - ARCHITECTURE.md explains the engine, LOCKING.md the lock order.
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
