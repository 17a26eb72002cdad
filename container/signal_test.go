package container

import (
	"syscall"
	"testing"

	"github.com/moby/sys/signal"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestStopSignalName(t *testing.T) {
	for sig, want := range map[runtimeapi.Signal]string{
		runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT: "",
		runtimeapi.Signal_SIGNAL_SIGQUIT:         "SIGQUIT",
		runtimeapi.Signal_SIGNAL_SIGRTMINPLUS1:   "SIGRTMIN+1",
		runtimeapi.Signal_SIGNAL_SIGRTMAXMINUS14: "SIGRTMAX-14",
		runtimeapi.Signal_SIGNAL_SIGRTMAX:        "SIGRTMAX",
	} {
		got, err := StopSignalName(sig)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := StopSignalName(66)
	require.ErrorContains(t, err, "66 is not a signal")
}

// Every name of the enum is one the stop path can send.
func TestEveryCRISignalParses(t *testing.T) {
	for v, name := range runtimeapi.Signal_name {
		if v == 0 {
			continue
		}
		oci, err := StopSignalName(runtimeapi.Signal(v))
		require.NoError(t, err, name)
		_, err = signal.ParseSignal(oci)
		require.NoError(t, err, name)
	}
	require.Equal(t, syscall.Signal(35), stopSignalNumber("SIGRTMIN+1"))
}

func TestStopSignalPrecedence(t *testing.T) {
	cfg := func(sig runtimeapi.Signal) *runtimeapi.ContainerConfig {
		return &runtimeapi.ContainerConfig{StopSignal: sig}
	}
	tests := []struct {
		name       string
		cfg        runtimeapi.Signal
		image      string
		wantRecord string
		wantSent   syscall.Signal
		wantStatus runtimeapi.Signal
	}{
		{"none: SIGTERM", 0, "", "", syscall.SIGTERM, runtimeapi.Signal_SIGNAL_SIGTERM},
		{"image by name", 0, "SIGWINCH", "SIGWINCH", syscall.SIGWINCH, runtimeapi.Signal_SIGNAL_SIGWINCH},
		{"image by number", 0, "3", "3", syscall.SIGQUIT, runtimeapi.Signal_SIGNAL_SIGQUIT},
		{"image short name", 0, "usr1", "usr1", syscall.SIGUSR1, runtimeapi.Signal_SIGNAL_SIGUSR1},
		{"image unparsable: SIGTERM", 0, "SIGFOO", "SIGFOO", syscall.SIGTERM, runtimeapi.Signal_SIGNAL_SIGTERM},
		{"config over image", runtimeapi.Signal_SIGNAL_SIGUSR2, "SIGWINCH", "SIGUSR2", syscall.SIGUSR2, runtimeapi.Signal_SIGNAL_SIGUSR2},
		{"config alias reads back as given", runtimeapi.Signal_SIGNAL_SIGIOT, "", "SIGIOT", syscall.SIGABRT, runtimeapi.Signal_SIGNAL_SIGIOT},
		{"image alias: first enum name", 0, "SIGIOT", "SIGIOT", syscall.SIGABRT, runtimeapi.Signal_SIGNAL_SIGABRT},
		{"config RT signal", runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3, "", "SIGRTMIN+3", syscall.Signal(37), runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := stopSignal(cfg(tc.cfg), tc.image)
			require.NoError(t, err)
			require.Equal(t, tc.wantRecord, rec)
			require.Equal(t, tc.wantSent, stopSignalNumber(rec))
			require.Equal(t, tc.wantStatus, criStopSignal(cfg(tc.cfg), rec))
		})
	}
	_, err := stopSignal(cfg(99), "")
	require.Error(t, err)
}
