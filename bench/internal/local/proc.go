package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// CPUTicks returns the process's utime+stime in clock ticks (USER_HZ), from /proc/<pid>/stat.
func CPUTicks(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return ParseStatTicks(b)
}

// ParseStatTicks returns utime+stime, in clock ticks, from the contents of /proc/<pid>/stat. The command name
// (field 2) is in parentheses and may itself hold spaces and parentheses, so fields are counted from the last ')'.
func ParseStatTicks(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("proc stat: no ')' after the command name")
	}
	// After ") " come field 3 (state), 4, ...; utime and stime are fields 14 and 15.
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the command name, want at least 13", len(fields))
	}
	utime, err := strconv.ParseUint(fields[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc stat: utime: %w", err)
	}
	stime, err := strconv.ParseUint(fields[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc stat: stime: %w", err)
	}
	return utime + stime, nil
}
