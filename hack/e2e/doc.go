// Package e2e holds the end-to-end tests that need a real browser: a page
// served by the test loads MQTT.js's browser bundle in headless Chromium
// and talks to a broker over WebSocket (browser_test.go, origin_test.go),
// and the dashboard of the real mqttd binary is driven over Chromium's
// DevTools protocol (dashboard_test.go, cdp_test.go). It has no code of its
// own; the tests run with go test ./... (hack/test).
package e2e
