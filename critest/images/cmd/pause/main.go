// Command pause is the program of the offline stand-ins for
// registry.k8s.io/pause (and k8s.gcr.io/pause): it holds a pod's namespaces
// open like Kubernetes' pause. SIGINT and SIGTERM end it with status 0;
// as PID 1 of a shared PID namespace it reaps every exited child. "-v"
// prints its name.
//
// It is built static by critest/images/cmd/mkimages; nothing imports it.
// shimd's own sandbox image is a different program (sandbox/pause).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "shimd-critest-pause"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println(version)
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
