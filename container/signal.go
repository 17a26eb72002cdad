package container

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/moby/sys/signal"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Stop signals. The CRI names them by enum (SIGNAL_SIGRTMINPLUS1); images and the
// container record by OCI name (SIGRTMIN+1), number or short name. The signal that
// stops a container is, in this order: the config's stop_signal, the image's
// STOPSIGNAL, SIGTERM (containerd 2.3+ and CRI-O 1.33+ use the same precedence).

// StopSignalName is the OCI name of a CRI stop signal: "" for RUNTIME_DEFAULT, an
// error for a value outside the enum.
func StopSignalName(sig runtimeapi.Signal) (string, error) {
	if sig == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return "", nil
	}
	name, ok := runtimeapi.Signal_name[int32(sig)]
	if !ok {
		return "", fmt.Errorf("%d is not a signal of the CRI's enum", sig)
	}
	name = strings.TrimPrefix(name, "SIGNAL_")
	name = strings.Replace(name, "PLUS", "+", 1)
	return strings.Replace(name, "MINUS", "-", 1), nil
}

// stopSignal is the stop signal to record for a new container: the config's, else
// the image's as given (checked when the container stops), else "".
func stopSignal(cfg *runtimeapi.ContainerConfig, image string) (string, error) {
	name, err := StopSignalName(cfg.GetStopSignal())
	if err != nil || name != "" {
		return name, err
	}
	return image, nil
}

// stopSignalNumber is the signal a stop sends: SIGTERM when none is recorded or the
// image's cannot be parsed.
func stopSignalNumber(recorded string) syscall.Signal {
	if recorded == "" {
		return syscall.SIGTERM
	}
	sig, err := signal.ParseSignal(recorded)
	if err != nil {
		return syscall.SIGTERM
	}
	return sig
}

// criSignals maps signal numbers to the first CRI enum value that names them
// (SIGABRT before its alias SIGIOT, SIGCHLD before SIGCLD, SIGIO before SIGPOLL).
var criSignals = func() map[syscall.Signal]runtimeapi.Signal {
	out := map[syscall.Signal]runtimeapi.Signal{}
	for v := int32(1); ; v++ {
		if _, ok := runtimeapi.Signal_name[v]; !ok {
			return out
		}
		name, _ := StopSignalName(runtimeapi.Signal(v))
		if n, err := signal.ParseSignal(name); err == nil {
			if _, seen := out[n]; !seen {
				out[n] = runtimeapi.Signal(v)
			}
		}
	}
}()

// criStopSignal is ContainerStatus.stop_signal: the config's when given (so an alias
// such as SIGIOT reads back as given), else the signal a stop really sends.
func criStopSignal(cfg *runtimeapi.ContainerConfig, recorded string) runtimeapi.Signal {
	if sig := cfg.GetStopSignal(); sig != runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return sig
	}
	if sig, ok := criSignals[stopSignalNumber(recorded)]; ok {
		return sig
	}
	return runtimeapi.Signal_SIGNAL_SIGTERM
}
