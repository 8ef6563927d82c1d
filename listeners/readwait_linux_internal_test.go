//go:build linux

package listeners

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// waitPair returns a waitConn with a hook over the server side of a
// loopback TCP connection, the client side, and the hook's calls.
func waitPair(t *testing.T) (*waitConn, net.Conn, chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	w, ok := newWaitConn(server).(*waitConn)
	if !ok {
		server.Close()
		t.Fatal("no waitConn over a TCP connection")
	}
	t.Cleanup(func() { w.Close() })
	waits := make(chan struct{}, 10)
	if !onReadWait(w, func() { waits <- struct{}{} }) {
		t.Fatal("onReadWait found no waitConn")
	}
	deadline := time.Now().Add(10 * time.Second)
	w.SetDeadline(deadline)
	client.SetDeadline(deadline)
	return w, client, waits
}

// TestWaitConnReadsAhead sends 10,000 bytes and reads them 512 at a time,
// as gorilla does through the engine's buffer: they come from one read
// ahead of the socket, the hook is not called while they last, the buffer
// goes back once they are read, and the next read, which waits, calls the
// hook once before it does.
func TestWaitConnReadsAhead(t *testing.T) {
	w, client, waits := waitPair(t)
	sent := bytes.Repeat([]byte("0123456789"), 1000)
	if _, err := client.Write(sent); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 512)
	for len(got) < len(sent) {
		n, err := w.Read(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
		if len(got) == 512 {
			if held := ReadAheadBytes(); held != readAheadSize {
				t.Errorf("after the first read, %d bytes of read-ahead buffers held, want %d", held, readAheadSize)
			}
		}
	}
	if !bytes.Equal(got, sent) {
		t.Fatal("the bytes read are not the bytes sent")
	}
	if len(waits) != 0 {
		t.Errorf("the hook was called %d times while input waited", len(waits))
	}
	if held := ReadAheadBytes(); held != 0 {
		t.Errorf("%d bytes of read-ahead buffers held once all was read", held)
	}

	done := make(chan error, 1)
	go func() {
		n, err := w.Read(buf)
		if err == nil && (n != 1 || buf[0] != 'x') {
			err = io.ErrUnexpectedEOF
		}
		done <- err
	}()
	select {
	case <-waits:
	case err := <-done:
		t.Fatalf("the read returned (%v) with nothing sent", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the hook was not called before the read waited")
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("read after the wait: %v", err)
	}
	if len(waits) != 0 {
		t.Errorf("the hook was called again during one read")
	}
}

// TestWaitConnCloseGivesBufferBack closes a connection whose read-ahead
// buffer still holds bytes: the buffer goes back to the pool.
func TestWaitConnCloseGivesBufferBack(t *testing.T) {
	w, client, _ := waitPair(t)
	if _, err := client.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Read(make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	if held := ReadAheadBytes(); held != readAheadSize {
		t.Fatalf("%d bytes of read-ahead buffers held with 3,584 bytes unread, want %d", held, readAheadSize)
	}
	w.Close()
	if held := ReadAheadBytes(); held != 0 {
		t.Errorf("%d bytes of read-ahead buffers held after Close", held)
	}
	if _, err := w.Read(make([]byte, 512)); err == nil {
		t.Error("a read after Close succeeded")
	}
}

// TestWaitConnReadsStraightPastTheBound holds every read-ahead buffer
// there may be: a read then goes into the caller's buffer, as it would
// without read-ahead.
func TestWaitConnReadsStraightPastTheBound(t *testing.T) {
	readAheadsHeld.Add(maxReadAheads)
	defer readAheadsHeld.Add(-maxReadAheads)
	w, client, _ := waitPair(t)
	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, err := w.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if w.ahead != nil || readAheadsHeld.Load() != maxReadAheads {
		t.Errorf("a read-ahead buffer was taken past the bound (%d held)", readAheadsHeld.Load())
	}
}
