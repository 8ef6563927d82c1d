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
	flags.Usage = func() {
		fmt.Fprint(stderr, "Usage: mqttd passwd [-c] FILE USER          (prompts for the password)\n"+
			"       mqttd passwd [-c] -b FILE USER PASSWORD\n"+
			"       mqttd passwd -D FILE USER\n\n"+
			"Writes Mosquitto-compatible password files (PBKDF2-SHA512, as mosquitto_passwd).\n\n")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
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
