// Command binsize shows what a Go binary carries (issue 42): the size of
// each ELF section the file holds, and the bytes of the symbols of each
// package (code, read-only data, data; not the zero-filled .bss), largest
// first. Give it a binary built without -s -w, otherwise as hack/release
// builds it, since the stripped release has no symbol table:
//
//	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -trimpath -tags nethttpomithttp2 -o /tmp/mqttd ./cmd/mqttd
//	go run ./hack/binsize -n 20 /tmp/mqttd
//
// A generic function's instantiations count for the package that defines
// it (slices.pdqsortCmpFunc[...] is slices, whoever sorts), a type's
// descriptor for the package of the type named (*T, []T and map[K]T are
// T's). The .gopclntab section (line tables and function names, about
// 0.8 of .text) and the descriptors the linker merges into one symbol
// (go:func.*, funcdata) are not split by package: the sum of the packages
// is about half the stripped file.
package main

import (
	"cmp"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

func main() {
	n := flag.Int("n", 30, "packages to list")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: binsize [-n packages] BINARY (built without -s -w)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Arg(0), *n); err != nil {
		fmt.Fprintln(os.Stderr, "binsize:", err)
		os.Exit(1)
	}
}

// run writes the sections of the binary at path and its n largest
// packages to w.
func run(w io.Writer, path string, n int) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(w, "%-16s %10s\n", "section", "bytes")
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOBITS && s.Flags&elf.SHF_ALLOC != 0 && s.Size > 0 {
			fmt.Fprintf(w, "%-16s %10d\n", s.Name, s.Size)
		}
	}
	syms, err := f.Symbols()
	if err != nil {
		return fmt.Errorf("%s: %w (built with -s?)", path, err)
	}
	pkgs := sizes(f, syms)
	var total uint64
	for _, p := range pkgs {
		total += p.code + p.data
	}
	fmt.Fprintf(w, "\n%10s %10s %10s  %s\n", "bytes", "code", "data", "package")
	for _, p := range pkgs[:min(n, len(pkgs))] {
		fmt.Fprintf(w, "%10d %10d %10d  %s\n", p.code+p.data, p.code, p.data, p.name)
	}
	fmt.Fprintf(w, "%10d %10s %10s  all %d packages\n", total, "", "", len(pkgs))
	return nil
}

// pkgSize is what one package's symbols hold.
type pkgSize struct {
	name       string
	code, data uint64
}

// sizes adds up the symbols the file holds by package, largest first.
func sizes(f *elf.File, syms []elf.Symbol) []pkgSize {
	by := map[string]*pkgSize{}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || int(s.Section) >= len(f.Sections) || s.Size == 0 {
			continue
		}
		sec := f.Sections[s.Section]
		if sec.Type == elf.SHT_NOBITS || sec.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		name := packageOf(s.Name)
		p := by[name]
		if p == nil {
			p = &pkgSize{name: name}
			by[name] = p
		}
		if sec.Flags&elf.SHF_EXECINSTR != 0 {
			p.code += s.Size
		} else {
			p.data += s.Size
		}
	}
	out := make([]pkgSize, 0, len(by))
	for _, p := range by {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b pkgSize) int {
		return cmp.Or(cmp.Compare(b.code+b.data, a.code+a.data), strings.Compare(a.name, b.name))
	})
	return out
}

// packageOf is the import path of the package a symbol belongs to:
// "net/http" for net/http.(*Server).Serve, "slices" for
// slices.SortFunc[...], "mqttd/packets" for type:*mqttd/packets.Properties.
// Linker symbols are counted by kind (go:func, go:itab, go:struct for the
// methods of unnamed structs).
func packageOf(sym string) string {
	if rest, ok := strings.CutPrefix(sym, "go:"); ok {
		// go:func.*, go:itab.*, go:struct {...}.Method: by kind.
		end := strings.IndexFunc(rest, func(r rune) bool { return r < 'a' || r > 'z' })
		if end < 0 {
			end = len(rest)
		}
		return "go:" + rest[:end]
	}
	for _, p := range []string{"type:.eq.", "type:.hash.", "type:"} {
		if rest, ok := strings.CutPrefix(sym, p); ok {
			sym = strings.TrimLeft(rest, "*[]0123456789")
			if strings.HasPrefix(sym, "map[") || strings.HasPrefix(sym, "func(") || strings.HasPrefix(sym, "struct ") ||
				strings.HasPrefix(sym, "chan ") || strings.HasPrefix(sym, "interface ") {
				return "type: (unnamed)"
			}
			break
		}
	}
	if i := strings.IndexByte(sym, '['); i > 0 {
		sym = sym[:i]
	}
	dir, base := "", sym
	if i := strings.LastIndexByte(sym, '/'); i >= 0 {
		dir, base = sym[:i+1], sym[i+1:]
	}
	if i := strings.IndexByte(base, '.'); i > 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(dir+base, "%2e", ".")
}
