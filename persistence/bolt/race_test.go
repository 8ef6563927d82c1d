//go:build race

package bolt

// raceEnabled shortens the tests that are slow under the race detector,
// which makes bbolt's page handling six times slower.
const raceEnabled = true
