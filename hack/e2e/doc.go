// Package e2e holds the end-to-end test that needs a real browser: a page
// served by the test loads MQTT.js's browser bundle in headless Chromium
// and talks to a broker over WebSocket. It has no code of its own; the
// test is browser_test.go, run by go test ./... (hack/test).
package e2e
