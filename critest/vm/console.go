package vm

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The guest's serial console: its log (read from an offset, or its tail) and
// commands typed into it when the agent does not answer.

// ConsolePath is the socket of the guest's serial console (a root shell).
func (v *VM) ConsolePath() string { return filepath.Join(v.dir, consoleSocket) }

// ConsoleTail is the last n lines of the guest's serial console: the kernel's
// messages (hung tasks, OOM kills, oopses) and whatever ran there. QEMU writes it
// on the host, so it is readable when the guest's agent no longer answers.
func (v *VM) ConsoleTail(n int) string {
	data, _ := os.ReadFile(filepath.Join(v.dir, ConsoleLog))
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n") + "\n"
}

// ConsoleRun types script into the root shell on the guest's serial console (the
// way in when the agent does not answer), waits for it, and returns what the
// console printed meanwhile: the script's output and the kernel's messages.
// The script's end is marked on the console, so a shell that answers returns as
// soon as it is done; a guest that does not returns after wait.
func (v *VM) ConsoleRun(script string, wait time.Duration) (string, error) {
	logPath := filepath.Join(v.dir, ConsoleLog)
	fi, err := os.Stat(logPath)
	if err != nil {
		return "", err
	}
	c, err := net.DialTimeout("unix", v.ConsolePath(), 5*time.Second)
	if err != nil {
		return "", fmt.Errorf("console: %w", err)
	}
	defer c.Close()
	// The console's reads are not wanted: the log has them.
	go func() { _, _ = io.Copy(io.Discard, c) }()
	mark := fmt.Sprintf("console-run-%d-done", time.Now().UnixNano())
	// Ctrl-C and Ctrl-U clear a half-typed line; the mark is split so that the
	// shell's echo of the typed line does not match it.
	// Typed slowly: the emulated UART's 16-byte FIFO drops what a busy guest has
	// not read in time.
	typed := []byte(fmt.Sprintf("\x03\x15\n%s\necho %s\"\"%s\n", script, mark[:8], mark[8:]))
	_ = c.SetWriteDeadline(time.Now().Add(time.Minute))
	for len(typed) > 0 {
		n := min(8, len(typed))
		if _, err := c.Write(typed[:n]); err != nil {
			return "", fmt.Errorf("console: %w", err)
		}
		typed = typed[n:]
		time.Sleep(20 * time.Millisecond)
	}
	var out string
	for deadline := time.Now().Add(wait); ; time.Sleep(500 * time.Millisecond) {
		out = readFrom(logPath, fi.Size())
		if strings.Contains(out, mark) || time.Now().After(deadline) {
			break
		}
	}
	return out, nil
}

func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// tail is the end of the console log and QEMU's log, for boot errors.
func (v *VM) tail() string {
	var b strings.Builder
	for _, f := range []string{ConsoleLog, qemuLog} {
		data, _ := os.ReadFile(filepath.Join(v.dir, f))
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		lines = lines[max(0, len(lines)-40):]
		fmt.Fprintf(&b, "--- last lines of %s:\n%s\n", f, strings.Join(lines, "\n"))
	}
	return b.String()
}
