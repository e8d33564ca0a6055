package cpurt

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// runDirPrefix names the cache directories of `go test` runs in
// os.TempDir(): attnc-run-<pid>-<start>, the process ID of the go
// command that runs the test binaries and its start time (in clock ticks
// since boot, field 22 of /proc/<pid>/stat), so that a later process that
// reuses the ID does not take the directory for its own.
const runDirPrefix = "attnc-run-"

// RunCacheEnv names a directory that the test binaries use as their run's
// cache directory instead of one of their own go command's (see
// RunCacheDir): CI sets it to share the objects between its go test
// commands (the default run's and the long passes'), and removes it.
const RunCacheEnv = "ATTNC_TEST_CACHE"

// RunCacheDir is the directory, made if missing, that the test binaries of
// one `go test` run share to cache what they build (sub names a folder in
// it per kind: "objects", "hostlibs"), and whether it is shared. The go
// command runs every package's test binary as its own child, so the
// binaries with the same parent process are one run: their directory in
// os.TempDir() is named after it. Users of a shared directory must write
// each file under a temporary name and rename it into place, and key it by
// everything its content depends on, as Go's own build cache does. A
// directory outlives the test binaries, which cannot know which of them is
// the last: each run removes the directories of runs whose go command has
// exited. $ATTNC_TEST_CACHE, when set, is the directory instead (its
// owner removes it). When the parent is not a go or test2json process (a
// test binary run by hand, or under -exec), the directory is a new
// temporary one of this process's own (shared false), for the caller to
// remove.
func RunCacheDir(sub string) (dir string, shared bool, err error) {
	if d := os.Getenv(RunCacheEnv); d != "" {
		dir = filepath.Join(d, sub)
		return dir, true, os.MkdirAll(dir, 0o700)
	}
	ppid := os.Getppid()
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	start, err := procStart(ppid)
	if name := strings.TrimSpace(string(comm)); err != nil || (name != "go" && name != "test2json") {
		dir, err = os.MkdirTemp("", "attnc-"+sub+"-")
		return dir, false, err
	}
	removeStaleRunDirs()
	dir = filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-%s", runDirPrefix, ppid, start), sub)
	return dir, true, os.MkdirAll(dir, 0o700)
}

// RunObjectCache is an object cache (see Objects) in the run's cache
// directory (RunCacheDir "objects"): the test packages of one `go test`
// run compile each distinct IR once between them.
func RunObjectCache() (*ObjectCache, error) {
	dir, shared, err := RunCacheDir("objects")
	if err != nil {
		return nil, err
	}
	return &ObjectCache{dir: dir, shared: shared, objs: map[string]*cachedObject{}}, nil
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

// removeStaleRunDirs removes the cache directories of runs whose go
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
