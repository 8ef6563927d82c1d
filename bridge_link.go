package mqttd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"mqttd/bridge"
	"mqttd/listeners"
	"mqttd/packets"
	"mqttd/session"
)

// A bridge's link: its client connection to the remote broker. The link
// goroutine dials, logs in (CONNECT, CONNACK), then hands the connection
// to the connection engine as the bridge session's conn and pings the
// remote every keepalive until the connection ends; then it waits (with
// backoff and jitter) and connects again, to the next address when one
// fails.

// bridgeConnectTimeout bounds a connection attempt: the dial, the TLS or
// WebSocket handshake and the CONNACK.
const bridgeConnectTimeout = 30 * time.Second

// start runs the link goroutine, once.
func (b *bridgeRun) start() { b.started.Do(func() { go b.run() }) }

func (b *bridgeRun) run() {
	defer close(b.done)
	b.publishState(false)
	wait := b.cfg.ReconnectMin
	next := 0
	for {
		addr := b.addrs[next]
		nc, ack, err := b.connect(addr)
		if b.stopped() {
			if nc != nil {
				nc.Close()
			}
			return
		}
		if err != nil {
			b.stats.failures.Add(1)
			b.setState(false, addr.String(), err)
			b.srv.log.Warn().Str("bridge", b.cfg.Name).Str("address", addr.String()).Err(err).
				Dur("retry_in", wait).Msg("bridge cannot connect to the remote broker")
			next = (next + 1) % len(b.addrs)
			if next == 0 { // every address failed: back off
				if !b.pause(wait) {
					return
				}
				wait = min(2*wait, b.cfg.ReconnectMax)
			}
			continue
		}
		wait = b.cfg.ReconnectMin
		reason := b.serveLink(nc, ack, addr)
		if b.stopped() {
			return
		}
		b.setState(false, addr.String(), reason)
		b.srv.log.Warn().Str("bridge", b.cfg.Name).Str("address", addr.String()).Err(reason).
			Msg("bridge disconnected from the remote broker")
		if b.cfg.RoundRobin {
			next = (next + 1) % len(b.addrs)
		} else {
			next = 0
		}
		if !b.pause(wait) {
			return
		}
	}
}

// stopped reports whether the link was told to stop.
func (b *bridgeRun) stopped() bool {
	select {
	case <-b.stop:
		return true
	default:
		return false
	}
}

// pause waits d, give or take a fifth (so that gateways cut off together
// do not come back together), or until the link is stopped; it reports
// false when stopped.
func (b *bridgeRun) pause(d time.Duration) bool {
	d = d - d/5 + rand.N(d/5*2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.stop:
		return false
	case <-t.C:
		return true
	}
}

// connect dials addr and logs in. The connection returned has read the
// CONNACK and nothing more, so that whatever the remote sends next is the
// engine's to read.
func (b *bridgeRun) connect(addr bridge.Address) (net.Conn, *packets.Connack, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bridgeConnectTimeout)
	defer cancel()
	go func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if (addr.Scheme == "tls" || addr.Scheme == "wss") && b.tlsErr != nil {
		return nil, nil, b.tlsErr
	}
	nc, err := listeners.Dial(ctx, addr.Scheme, addr.Host, addr.Path, b.tls)
	if err != nil {
		return nil, nil, err
	}
	ack, err := b.login(ctx, nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, ack, nil
}

// version is the protocol version spoken to the remote.
func (b *bridgeRun) version() packets.Version {
	if b.cfg.Protocol == "3.1.1" {
		return packets.V311
	}
	return packets.V5
}

// login sends the CONNECT and reads the CONNACK, within ctx.
func (b *bridgeRun) login(ctx context.Context, nc net.Conn) (*packets.Connack, error) {
	v := b.version()
	cp := &packets.Connect{ClientID: b.cfg.ClientID, CleanStart: b.cfg.CleanStart,
		KeepAlive: uint16(b.cfg.KeepAlive / time.Second), Bridge: v != packets.V5 && !b.cfg.NoTryPrivate}
	if b.cfg.Username != "" {
		cp.UsernameFlag, cp.Username = true, b.cfg.Username
	}
	pw, err := b.cfg.PasswordValue()
	if err != nil {
		return nil, err
	}
	if pw != "" {
		cp.PasswordFlag, cp.Password = true, []byte(pw)
	}
	if v == packets.V5 {
		p := &cp.Properties
		if e := b.cfg.SessionExpiry / time.Second; e > 0 {
			p.SessionExpiry = uint32(min(e, 0xFFFFFFFF))
			p.Set(packets.PropSessionExpiry)
		}
		p.MaximumPacketSize = uint32(b.srv.opts.Limits.MaxPacketSize)
		p.Set(packets.PropMaximumPacketSize)
		if n := b.srv.opts.Limits.MaxAwaitingRel; n < 65535 {
			p.ReceiveMaximum = uint16(n)
			p.Set(packets.PropReceiveMaximum)
		}
	}
	frame, err := cp.Append(nil, v)
	if err != nil {
		return nil, fmt.Errorf("encoding CONNECT: %w", err)
	}
	if d, ok := ctx.Deadline(); ok {
		nc.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	defer stop()
	if _, err := nc.Write(frame); err != nil {
		return nil, fmt.Errorf("sending CONNECT: %w", err)
	}
	p, err := readFrame(nc, v, b.srv.opts.Limits.MaxPacketSize)
	if err != nil {
		return nil, fmt.Errorf("reading CONNACK: %w", err)
	}
	ack, ok := p.(*packets.Connack)
	if !ok {
		return nil, fmt.Errorf("the remote answered CONNECT with %s", p.Type())
	}
	if ack.ReasonCode != packets.Success {
		return nil, fmt.Errorf("the remote refused the connection: %s", connackReason(v, ack.ReasonCode))
	}
	nc.SetDeadline(time.Time{})
	return ack, nil
}

// connackReason names a CONNACK's refusal: 3.1.1's return codes are not
// 5.0's reason codes.
func connackReason(v packets.Version, code packets.ReasonCode) string {
	if v == packets.V5 {
		return fmt.Sprintf("reason code 0x%02X", byte(code))
	}
	switch code {
	case 1:
		return "unacceptable protocol version (1)"
	case 2:
		return "identifier rejected (2)"
	case 3:
		return "server unavailable (3)"
	case 4:
		return "bad user name or password (4)"
	case 5:
		return "not authorized (5)"
	}
	return fmt.Sprintf("return code %d", code)
}

// readFrame reads exactly one frame from r, byte by byte for the header,
// so that nothing after it is read.
func readFrame(r io.Reader, v packets.Version, maxSize int) (packets.Packet, error) {
	var head [5]byte
	for n := 1; ; n++ {
		if n > len(head) {
			return nil, errors.New("malformed fixed header")
		}
		if _, err := io.ReadFull(r, head[n-1:n]); err != nil {
			return nil, err
		}
		fh, hn, err := packets.ParseFixedHeader(head[:n], v, maxSize)
		if err != nil {
			return nil, err
		}
		if hn == 0 {
			continue
		}
		body := make([]byte, fh.Remaining)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, err
		}
		return packets.Decode(fh, body, v)
	}
}

// serveLink runs a logged-in connection as the bridge session's conn
// until it ends or the link is stopped, and returns why it ended.
func (b *bridgeRun) serveLink(nc net.Conn, ack *packets.Connack, addr bridge.Address) error {
	s := b.srv
	c := newConn(s, nc, bridgeListener)
	c.version = b.version()
	c.info.ClientID = b.id
	c.expiry = bridgeExpiry
	c.keepAlive = uint16(b.cfg.KeepAlive / time.Second) // whole seconds (bridge.Config.Validate)
	if ack.Properties.Has(packets.PropServerKeepAlive) {
		c.keepAlive = ack.Properties.ServerKeepAlive
	}
	if ack.Properties.Has(packets.PropMaximumPacketSize) {
		c.maxOut = ack.Properties.MaximumPacketSize
	}
	ended := make(chan error, 1)
	b.ended = ended
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		nc.Close()
		return ErrServerClosed
	}
	s.trackLocked(c)
	s.connWG.Add(1)
	s.mu.Unlock()
	s.stats.connections.Add(1)
	// The socket is the engine's before attach sends the window again,
	// and watched only after, when the session is the connection's.
	evented := c.detachSocket(s.poller)
	cp := &packets.Connect{ClientID: b.id}
	cp.Properties.ReceiveMaximum = ack.Properties.ReceiveMaximum // 0: none given, the window stands
	if r := s.attach(c, cp, false, 0); r != attachOK {
		err := closing(CloseInternalError, fmt.Errorf("bridge session not attached (%d)", r))
		c.closeWith(err)
		s.untrack(c)
		return err
	}
	// attach queued the window as the reader's own answers would be;
	// this goroutine is the reader until the engine's starts.
	c.flushDeferred()
	c.connected.Store(true)
	b.link.Store(c)
	defer b.link.Store(nil)
	b.stats.connects.Add(1)
	b.setState(true, addr.String(), nil)
	s.log.Info().Str("bridge", b.cfg.Name).Str("address", addr.String()).Str("remote_client_id", b.cfg.ClientID).
		Bool("session_present", ack.SessionPresent).Msg("bridge connected to the remote broker")
	if evented {
		c.watchEvents(s.poller)
	} else {
		go c.serve()
	}
	c.startKeepAlive()
	b.subscribeRemote(c)
	var tick <-chan time.Time
	if c.keepAlive > 0 {
		t := time.NewTicker(c.keepAliveLimit())
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case err := <-ended:
			return err
		case <-b.stop:
			c.shutdown()
			return <-ended
		case <-tick:
			c.enqueue(woken, func(p []byte) []byte {
				p, _ = (&packets.Pingreq{}).Append(p, c.version)
				return p
			})
		}
	}
}

// closedFor records why the link's connection was closed.
func (b *bridgeRun) closedFor(err error) {
	b.mu.Lock()
	b.closeErr = err
	b.mu.Unlock()
}

// linkEnded is called by the cleanup of the link's connection, once the
// session is detached from it.
func (b *bridgeRun) linkEnded() {
	b.mu.Lock()
	err := b.closeErr
	b.mu.Unlock()
	select {
	case b.ended <- err:
	default:
	}
}

// subscribeRemote subscribes on the remote to the in rules, under a
// packet id the session reserves, so that no PUBLISH in flight has it.
func (b *bridgeRun) subscribeRemote(c *conn) {
	sub := &packets.Subscribe{}
	for _, r := range b.cfg.Topics {
		if !r.Comes() {
			continue
		}
		o := packets.SubOptions{QoS: r.QoSOrDefault()}
		if c.version == packets.V5 {
			// No Local: what the bridge forwards does not come back.
			// Retain As Published: retained messages stay retained here.
			// Retain handling 1: a session kept on the remote does not
			// send every retained message again at each reconnection.
			o.NoLocal, o.RetainAsPublished = true, true
			if !b.cfg.CleanStart {
				o.RetainHandling = 1
			}
		}
		sub.Subscriptions = append(sub.Subscriptions, packets.Subscription{Filter: r.RemoteFilter(), Options: o})
	}
	if len(sub.Subscriptions) == 0 {
		return
	}
	cl := c.cl
	cl.mu.Lock()
	sub.PacketID = cl.sess.ReserveID()
	cl.mu.Unlock()
	b.subPending.Store(uint32(sub.PacketID))
	c.enqueue(woken, func(p []byte) []byte {
		p, err := sub.Append(p, c.version)
		if err != nil {
			b.srv.log.Error().Str("bridge", b.cfg.Name).Err(err).Msg("cannot encode the bridge's SUBSCRIBE")
		}
		return p
	})
}

// handleRemote acts on a packet from the remote broker other than a
// PUBLISH or an acknowledgement of one.
func (c *conn) handleRemote(b *bridgeRun, p packets.Packet) error {
	switch p := p.(type) {
	case *packets.Publish:
		return c.handlePublish(p, false)
	case *packets.Pingresp, *packets.Unsuback:
		return nil
	case *packets.Suback:
		if uint32(p.PacketID) != b.subPending.Load() {
			return c.protocolError("[MQTT-3.9.3-1]", fmt.Sprintf("SUBACK for packet id %d, which no SUBSCRIBE has", p.PacketID))
		}
		b.subPending.Store(0)
		b.subacked(p.ReasonCodes)
		return nil
	case *packets.Disconnect:
		return closing(CloseClientDisconnect, fmt.Errorf("the remote broker disconnected the bridge: reason code 0x%02X", byte(p.ReasonCode)))
	default:
		return c.protocolError("[MQTT-3.1.0-1]", fmt.Sprintf("the remote broker sent %s, which only a client sends", p.Type()))
	}
}

// subacked logs the in rules the remote refused.
func (b *bridgeRun) subacked(codes []packets.ReasonCode) {
	i := 0
	for _, r := range b.cfg.Topics {
		if !r.Comes() {
			continue
		}
		if i < len(codes) && codes[i] >= 0x80 {
			b.srv.log.Warn().Str("bridge", b.cfg.Name).Str("filter", r.RemoteFilter()).Str("code", fmt.Sprintf("0x%02X", byte(codes[i]))).
				Msg("the remote broker refused the bridge's subscription: nothing comes in for this rule")
		}
		i++
	}
}

// remoteTopic is the topic a message for the remote goes out on.
func (b *bridgeRun) remoteTopic(local string) string {
	if t, _, ok := b.cfg.ToRemote(local); ok {
		return t
	}
	return local // a filter changed by a reload while the message was queued
}

// localTopic is the topic a message from the remote is published on
// here; ok is false when no in rule takes it.
func (b *bridgeRun) localTopic(remote string) (string, bool) {
	t, _, ok := b.cfg.ToLocal(remote)
	if !ok {
		return remote, false
	}
	b.stats.forwardedIn.Add(1)
	return t, true
}

// appendPublish encodes a message for the remote, on its remote topic.
// A PUBLISH from a client carries no subscription identifier
// [MQTT-3.3.4-6], and the bridge takes no topic aliases.
func (b *bridgeRun) appendPublish(dst []byte, v packets.Version, o session.Outbound) ([]byte, error) {
	m := o.Msg
	topic := b.remoteTopic(m.Topic)
	if v != packets.V5 || m.Properties == nil && m.Expiry == 0 {
		return packets.AppendPublishPlain(dst, v, o.Dup, o.QoS, o.Retain, topic, o.PacketID, m.Payload)
	}
	p := packets.Publish{Dup: o.Dup, QoS: o.QoS, Retain: o.Retain, Topic: topic, PacketID: o.PacketID,
		Payload: m.Payload, Properties: forwardProperties(m, nil)}
	return p.Append(dst, v)
}
