// The go tool refuses C files in a package that does not use cgo; this
// constraint makes it skip this one (it is built by the Makefile instead).
//go:build ignore

/*
 * pause: the process that holds a pod sandbox's namespaces open.
 *
 * It does what Kubernetes' own pause does, and nothing more:
 *   - SIGINT or SIGTERM: exit with status 0, printing nothing;
 *   - SIGCHLD: reap every exited child (it is PID 1 of the pod's shared PID
 *     namespace, so orphans are re-parented to it);
 *   - otherwise sleep in pause(2) forever.
 * "-v" prints the version and exits.
 *
 * Built static with musl by the Makefile beside it; the binary is kept in the
 * repository as pause.bin and embedded into shimd's built-in pause image.
 * Keep VERSION equal to the Version constant in pause.go.
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION "shimd-pause 1.0\n"

static void sigdown(int signo)
{
	(void)signo;
	_exit(0);
}

static void sigreap(int signo)
{
	(void)signo;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

static void handle(int signo, void (*fn)(int), int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sa.sa_flags = flags;
	if (sigaction(signo, &sa, NULL) < 0)
		_exit(1);
}

int main(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-v") == 0) {
			if (write(1, VERSION, sizeof(VERSION) - 1) < 0)
				return 1;
			return 0;
		}
	}

	handle(SIGINT, sigdown, 0);
	handle(SIGTERM, sigdown, 0);
	handle(SIGCHLD, sigreap, SA_NOCLDSTOP | SA_RESTART);

	for (;;)
		pause();
	return 42; /* not reached */
}
