// Package sysmem reads how much memory this process may use: the
// machine's, or its cgroup's limit when lower. The broker derives its
// default memory budget from it.
package sysmem

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// Available is the memory this process may use, in bytes: the
// lowest of the machine's memory and the cgroup (v2 or v1) limits; 0 when
// none can be read.
func Available() int64 {
	var mem int64
	lower := func(v int64) {
		if v > 0 && (mem == 0 || v < mem) {
			mem = v
		}
	}
	lower(memTotal("/proc/meminfo"))
	lower(cgroupLimit("/sys/fs/cgroup/memory.max"))
	lower(cgroupLimit("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
	return mem
}

// memTotal reads MemTotal from a meminfo file.
func memTotal(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemTotal:"))
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte(" kB"))), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// cgroupLimit reads a cgroup memory limit; "max" (v2) and the huge
// number v1 uses for none mean no limit, 0.
func cgroupLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || v >= 1<<60 {
		return 0
	}
	return v
}
