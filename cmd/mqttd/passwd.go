package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"mqttd/auth/passwd"
)

// runPasswd is "mqttd passwd", mosquitto_passwd's -c, -b and -D: it
// creates, updates and deletes entries of a password file. It returns the
// exit code.
func runPasswd(args []string, stdin io.Reader, stderr io.Writer) int {
	flags := flag.NewFlagSet("mqttd passwd", flag.ContinueOnError)
	flags.SetOutput(stderr)
	create := flags.Bool("c", false, "create the file, replacing any that exists")
	batch := flags.Bool("b", false, "take the password from the command line")
	del := flags.Bool("D", false, "delete the user")
	upgrade := flags.Bool("upgrade", false, "list the users whose entries are still $6$ (exit status 1 if any)")
	flags.Usage = func() {
		fmt.Fprint(stderr, "Usage: mqttd passwd [-c] FILE USER          (prompts for the password)\n"+
			"       mqttd passwd [-c] -b FILE USER PASSWORD\n"+
			"       mqttd passwd -D FILE USER\n"+
			"       mqttd passwd --upgrade FILE\n\n"+
			"Writes Mosquitto-compatible password files (PBKDF2-SHA512, as mosquitto_passwd).\n\n")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *upgrade {
		if flags.NArg() != 1 || *create || *batch || *del {
			flags.Usage()
			return 2
		}
		return listLegacy(flags.Arg(0), stderr)
	}
	want := 2
	if *batch {
		want = 3
	}
	if flags.NArg() != want || (*del && (*create || *batch)) {
		flags.Usage()
		return 2
	}
	file, user := flags.Arg(0), flags.Arg(1)
	var err error
	switch {
	case *del:
		err = passwd.Delete(file, user)
	case *batch:
		err = passwd.Set(file, user, []byte(flags.Arg(2)), *create)
	default:
		var pw []byte
		if pw, err = promptPassword(stdin, stderr); err == nil {
			err = passwd.Set(file, user, pw, *create)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "mqttd passwd:", err)
		if errors.Is(err, fs.ErrNotExist) && !*create && !*del {
			fmt.Fprintln(stderr, "mqttd passwd: -c creates a new file")
		}
		return 1
	}
	return 0
}

// listLegacy is "mqttd passwd --upgrade FILE". A $6$ entry cannot be
// made $7$ without its password, which the file does not hold, and the
// broker does not rewrite entries as users log in (the file is the
// operator's, often read-only to the broker, as with Mosquitto): so it
// lists the users still on $6$ and says how to upgrade each, with exit
// status 1 while any remain, for scripts.
func listLegacy(file string, out io.Writer) int {
	users, err := passwd.Load(file)
	if err != nil {
		fmt.Fprintln(out, "mqttd passwd:", err)
		return 1
	}
	legacy := users.Legacy()
	if len(legacy) == 0 {
		fmt.Fprintf(out, "%s: no $6$ entries: every user is PBKDF2-SHA512 ($7$)\n", file)
		return 0
	}
	fmt.Fprintf(out, "%s: %d of %d users have $6$ entries (one salted SHA-512, from Mosquitto before 2.0):\n",
		file, len(legacy), len(users))
	for _, u := range legacy {
		fmt.Fprintln(out, "  "+u)
	}
	fmt.Fprintf(out, "They cannot be converted without their passwords. Set each again, which writes it as $7$:\n"+
		"  mqttd passwd %s USER\nthen send the broker SIGHUP.\n", file)
	return 1
}

// promptPassword asks twice, without echo when stdin is a terminal, and
// refuses an empty password or two that differ.
func promptPassword(stdin io.Reader, prompts io.Writer) ([]byte, error) {
	if f, ok := stdin.(*os.File); ok {
		restore, err := noEcho(f)
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	r := bufio.NewReader(stdin)
	read := func(prompt string) ([]byte, error) {
		fmt.Fprint(prompts, prompt)
		line, err := r.ReadBytes('\n')
		// Echo is off, so the user's Enter did not move to a new line.
		fmt.Fprintln(prompts)
		if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
			return nil, fmt.Errorf("reading the password: %w", err)
		}
		return bytes.TrimRight(line, "\r\n"), nil
	}
	pw, err := read("Password: ")
	if err != nil {
		return nil, err
	}
	if len(pw) == 0 {
		return nil, errors.New("empty password")
	}
	again, err := read("Reenter password: ")
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(pw, again) {
		return nil, errors.New("passwords do not match")
	}
	return pw, nil
}
