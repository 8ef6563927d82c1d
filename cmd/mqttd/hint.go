package main

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"strings"

	"mqttd"
)

// hintOthers says, when only this machine can connect, how to let other
// machines in with the listeners and files this configuration has: the
// same transports on every address, with a password file (the one it
// has, or one to make), as flags or as edits of the config file.
func hintOthers(w io.Writer, cfg config, configFile string) {
	pw := cfg.Auth.PasswordFile
	makePw := ""
	if pw == "" {
		pw = "passwords"
		makePw = "mqttd passwd -c passwords USER && "
	}
	fmt.Fprintln(w, "  Only this machine can connect. To accept others with passwords:")
	wide := wideListeners(cfg.Listeners)
	if configFile != "" {
		var addrs []string
		for _, lc := range wide {
			addrs = append(addrs, lc.Address)
		}
		fmt.Fprintf(w, "    in %s, set the listeners' addresses to %s", configFile, strings.Join(addrs, ", "))
		if makePw != "" {
			fmt.Fprint(w, " and auth.password_file to a file made with mqttd passwd -c FILE USER")
		}
		fmt.Fprintln(w, ", then restart.")
		return
	}
	var args []string
	tlsFlags := ""
	for _, lc := range wide {
		switch lc.Type {
		case "tls", "wss":
			tlsFlags = fmt.Sprintf(" --tls-cert %s --tls-key %s", lc.CertFile, lc.KeyFile)
			if lc.ClientCAFile != "" {
				tlsFlags += " --tls-client-ca " + lc.ClientCAFile
			}
		}
		args = append(args, "--listen "+listenArg(lc))
	}
	fmt.Fprintf(w, "    %smqttd %s%s --password-file %s\n", makePw, strings.Join(args, " "), tlsFlags, pw)
	if makePw != "" {
		fmt.Fprintln(w, "  (or, on a network you trust, --allow-anonymous true; every setting also goes in a --config file).")
	}
}

// wideListeners are the network listeners of lcs moved to every IPv4
// address, each on its port; a plain TCP one on 1883 when there is none
// (unix sockets only).
func wideListeners(lcs []mqttd.ListenerConfig) []mqttd.ListenerConfig {
	var wide []mqttd.ListenerConfig
	for _, lc := range lcs {
		if lc.Type == "unix" {
			continue
		}
		_, port, err := net.SplitHostPort(lc.Address)
		if err != nil {
			continue
		}
		lc.Address = net.JoinHostPort("0.0.0.0", port)
		wide = append(wide, lc)
	}
	if len(wide) == 0 {
		wide = append(wide, mqttd.ListenerConfig{Type: "tcp", Address: "0.0.0.0:1883"})
	}
	return wide
}

// listenArg is lc as a --listen value.
func listenArg(lc mqttd.ListenerConfig) string {
	switch typ := cmp.Or(lc.Type, "tcp"); typ {
	case "ws", "wss":
		return typ + "://" + lc.Address + cmp.Or(lc.Path, "/mqtt")
	case "tls":
		return "tls://" + lc.Address
	}
	return lc.Address
}
