/* The test node's pod sandbox ("pause") process: holds the pod's namespaces, reaps
 * orphaned children (it is PID 1 when the pod shares its PID namespace), and exits on
 * SIGTERM or SIGINT. Built statically by scripts/build-images.sh; packed FROM scratch. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signum) { _exit(signum == SIGTERM || signum == SIGINT ? 0 : 1); }

static void reap(int signum) {
    (void)signum;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction on_stop = {.sa_handler = stop};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    if (sigaction(SIGTERM, &on_stop, NULL) < 0 || sigaction(SIGINT, &on_stop, NULL) < 0 ||
        sigaction(SIGCHLD, &on_child, NULL) < 0) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
