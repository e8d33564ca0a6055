package cpurt

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// runDirPrefix names the object directories of `go test` runs in
// os.TempDir(): attnc-run-objects-<pid>-<start>, the process ID of the go
// command that runs the test binaries and its start time (in clock ticks
// since boot, field 22 of /proc/<pid>/stat), so that a later process that
// reuses the ID does not take the directory for its own.
const runDirPrefix = "attnc-run-objects-"

// RunObjectCache is an object cache (see Objects) shared by the test
// binaries of one `go test` run: the go command runs every package's test
// binary as its own child, so the binaries with the same parent process
// are one run, and they keep their objects in one directory of
// os.TempDir() named after it (safe with packages running in parallel:
// an object is written under a temporary name and renamed into place, and
// the key is the exact IR, the commands and the tools' versions, as in Go's
// own build cache). A directory outlives the test binaries, which cannot
// know which of them is the last: each run removes the directories of
// runs whose go command has exited. When the parent is not a go or
// test2json process (a test binary run by hand, or under -exec), the
// cache is this process's own, as NewObjectCache's.
func RunObjectCache() (*ObjectCache, error) {
	ppid := os.Getppid()
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	start, err := procStart(ppid)
	if name := strings.TrimSpace(string(comm)); err != nil || (name != "go" && name != "test2json") {
		return NewObjectCache()
	}
	removeStaleRunDirs()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-%s", runDirPrefix, ppid, start))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &ObjectCache{dir: dir, shared: true, objs: map[string]*cachedObject{}}, nil
}

// procStart is the start time of process pid, in clock ticks since boot.
func procStart(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it follow its last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", fmt.Errorf("cpurt: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", fmt.Errorf("cpurt: /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return f[19], nil // field 22: starttime
}

// removeStaleRunDirs removes the object directories of runs whose go
// command has exited (no process with the ID, or one started at another
// time).
func removeStaleRunDirs() {
	ents, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), runDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, start, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil {
			continue
		}
		if now, err := procStart(pid); err == nil && now == start {
			continue
		}
		os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
	}
}

// WithRunObjects runs a test binary's tests (m.Run, from TestMain) with
// Objects set to the run's object cache (RunObjectCache) and returns their
// exit code; when the cache cannot be made it says so and compiles every
// time, as without it.
func WithRunObjects(run func() int) int {
	c, err := RunObjectCache()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpurt: no run object cache:", err)
		return run()
	}
	saved := Objects
	Objects = c
	defer func() { Objects = saved; c.Remove() }()
	return run()
}
