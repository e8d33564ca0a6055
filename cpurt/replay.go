package cpurt

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Recorded objects: a machine without LLVM 14 (a GPU server's image, a
// lent machine with the CPU to be measured) can still build and run the
// kernels when another machine compiled the same IR before. Generated IR
// is deterministic byte for byte, so running the same command on both
// machines asks for the same objects:
//
//	ATTNC_RECORD_OBJECTS=DIR  every object opt and llc compile is also
//	                          written to DIR, named by its recording key
//	ATTNC_REPLAY_OBJECTS=DIR  opt and llc never run: each object comes
//	                          from DIR, and a missing one is an error that
//	                          names the IR file and the key
//
// Only the link step (gcc -shared) runs on the replaying machine. The
// recording key is the SHA-256 of the IR's text and of the opt and llc
// command lines with the tools and files named by their roles (triple,
// -mcpu flags and all), but not of the tools' paths or --version output:
// the recording machine's tools stand for the replaying one's, which has
// none. DIR's VERSIONS file says which tools recorded it.
const (
	RecordObjectsEnv = "ATTNC_RECORD_OBJECTS"
	ReplayObjectsEnv = "ATTNC_REPLAY_OBJECTS"
)

// replayDir is $ATTNC_REPLAY_OBJECTS: "" compiles with opt and llc.
func replayDir() string { return os.Getenv(ReplayObjectsEnv) }

// recordingKey is the key of src's object under the compile commands
// args (objectArgs: tools and files named by their roles).
func recordingKey(src []byte, args [][]string) string {
	h := sha256.New()
	fmt.Fprintf(h, "attnc recorded object 1\x00%d\x00", len(src))
	h.Write(src)
	for _, a := range args {
		fmt.Fprintf(h, "\x00%s", strings.Join(a, "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// objectArgs are the opt and llc commands that compile llPath into obj
// (through obj+".bc"), the tools named "opt" and "llc": with mtriple
// ("-mtriple=..." or "" for the host's default) and mcpu.
func objectArgs(mtriple string, mcpu []string, llPath, obj string) [][]string {
	var triple []string
	if mtriple != "" {
		triple = []string{mtriple}
	}
	bc := obj + ".bc"
	return [][]string{
		append(append(append([]string{"opt", "-O3"}, triple...), mcpu...), llPath, "-o", bc),
		append(append(append([]string{"llc", "-O3"}, triple...), mcpu...), "-relocation-model=pic", "-filetype=obj", bc, "-o", obj),
	}
}

// resolveTools is args with "opt" and "llc" replaced by LLVM 14's paths
// (findLLVM).
func resolveTools(args [][]string) ([][]string, error) {
	out := make([][]string, len(args))
	for i, a := range args {
		p, err := findLLVM(a[0])
		if err != nil {
			return nil, err
		}
		out[i] = append([]string{p}, a[1:]...)
	}
	return out, nil
}

// produceObject makes llPath's object at obj with the commands of
// objectArgs(mtriple, mcpu, ...): from $ATTNC_REPLAY_OBJECTS when it is
// set, else with opt and llc, recording it in $ATTNC_RECORD_OBJECTS when
// that is set.
func produceObject(mtriple string, mcpu []string, llPath, obj string) error {
	if dir := replayDir(); dir != "" {
		src, err := os.ReadFile(llPath)
		if err != nil {
			return err
		}
		p, err := replayedObject(dir, llPath, recordingKey(src, objectArgs(mtriple, mcpu, "IN.ll", "OUT.o")))
		if err != nil {
			return err
		}
		return CopyFile(p, obj, 0o644)
	}
	steps, err := resolveTools(objectArgs(mtriple, mcpu, llPath, obj))
	if err != nil {
		return err
	}
	defer os.Remove(obj + ".bc")
	if err := runSteps(llPath, steps); err != nil {
		return err
	}
	return recordObject(mtriple, mcpu, llPath, obj)
}

// replayedObject is the path of key's object in the replay directory dir,
// or an error saying how to record it.
func replayedObject(dir, llPath, key string) (string, error) {
	p := filepath.Join(dir, key+".o")
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("cpurt: %s=%s holds no object for %s (key %s): run the same command where LLVM 14 is installed with %s=%s, then bring that directory here",
			ReplayObjectsEnv, dir, llPath, key[:16], RecordObjectsEnv, dir)
	}
	return p, nil
}

// recordObject copies obj, compiled from llPath with objectArgs(mtriple,
// mcpu, ...), into $ATTNC_RECORD_OBJECTS under its recording key (under a
// temporary name, then renamed: processes recording at once never leave
// half an object), and writes the directory's VERSIONS file once. Nothing
// when the variable is unset.
func recordObject(mtriple string, mcpu []string, llPath, obj string) error {
	dir := os.Getenv(RecordObjectsEnv)
	if dir == "" {
		return nil
	}
	src, err := os.ReadFile(llPath)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeVersions(dir); err != nil {
		return err
	}
	key := recordingKey(src, objectArgs(mtriple, mcpu, "IN.ll", "OUT.o"))
	final := filepath.Join(dir, key+".o")
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	return StoreFile(obj, final, 0o644)
}

// writeVersions writes dir/VERSIONS, the LLVM version line of opt's and
// llc's --version output, when it does not exist yet.
func writeVersions(dir string) error {
	p := filepath.Join(dir, "VERSIONS")
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	var b strings.Builder
	b.WriteString("objects recorded by attnc (cpurt) with:\n")
	for _, t := range []string{"opt", "llc"} {
		path, err := findLLVM(t)
		if err != nil {
			return err
		}
		v, err := toolVersion(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s: %s\n", path, versionLine(v))
	}
	return storeWith(p, 0o644, func(tmp string) error { return os.WriteFile(tmp, []byte(b.String()), 0o644) })
}

// CopyFile copies the file src to dst, created (or truncated) with mode.
func CopyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// StoreFile copies src to dst under a temporary name in dst's folder, then
// renames it into place with mode: a process that opens dst (a test binary
// sharing a cache, a recording beside this one) never finds half a file.
func StoreFile(src, dst string, mode os.FileMode) error {
	return storeWith(dst, mode, func(tmp string) error { return CopyFile(src, tmp, mode) })
}

// storeWith has write fill a temporary file in dst's folder, then gives it
// mode and renames it to dst.
func storeWith(dst string, mode os.FileMode, write func(tmp string) error) error {
	f, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+"-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	f.Close()
	defer os.Remove(tmp)
	if err := write(tmp); err != nil {
		return err
	}
	// CreateTemp made it 0600, and the umask may narrow mode.
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
