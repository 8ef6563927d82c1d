// Command mqttd runs the mqttd MQTT broker.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "mqttd: the broker is not built yet; see README.md")
	os.Exit(1)
}
