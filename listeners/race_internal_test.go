//go:build race

package listeners

// RaceDetector tells the tests whether they run under the race detector.
const RaceDetector = true
