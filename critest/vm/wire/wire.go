// Package wire is what the test VM's agent (critest/vm/agent) and the host
// (critest/vm) send each other over the virtio-serial port: one JSON object per line.
package wire

// PortName is the virtio-serial port's name; the guest sees it at GuestPort.
const PortName = "org.shimd.agent"

// GuestPort is where udev puts the port in the guest.
const GuestPort = "/dev/virtio-ports/" + PortName

// GuestPath is the PATH commands run with: the guest's own directories only. The
// share's bin holds nothing but the agent, and a lookup there is a 9p request for
// every command a script runs.
const GuestPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Request asks the agent to run Cmd under bash -c.
type Request struct {
	ID  uint64 `json:"id"`
	Cmd string `json:"cmd"`
	// TimeoutSeconds kills the command's process group after that long; 0: none.
	TimeoutSeconds int `json:"timeout,omitempty"`
}

// Frame is output of request ID (Out), or its end (Exit, and Err when the agent
// could not run it or it timed out).
type Frame struct {
	ID   uint64 `json:"id"`
	Out  []byte `json:"out,omitempty"`
	Exit *int   `json:"exit,omitempty"`
	Err  string `json:"err,omitempty"`
}
