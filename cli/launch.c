/*
 * launch.c — `kiln launch` and the data-parallel part of `kiln train` (public API only).
 *
 * kiln launch --nproc N [--master-addr A] [--master-port P] -- COMMAND ARGS...
 *   starts N copies of COMMAND on this host with torchrun's variables (RANK, LOCAL_RANK,
 *   WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the port a free one unless
 *   given), each in a process group of its own, forwards SIGINT, SIGTERM and SIGHUP to
 *   those groups, and waits. When one fails (a
 *   non-zero exit or a signal) it names that rank, stops the others (SIGTERM, then SIGKILL
 *   after 5 s) and exits non-zero; when all succeed, 0.
 */
#include "launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t forward_sig;

static void on_signal(int sig) { forward_sig = sig; }

/* A TCP port free right now on this host (the kernel's pick). */
static int free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(s);
    return port;
}

static void describe(char *buf, size_t n, int status) {
    if (WIFEXITED(status)) snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(buf, n, "stopped (status %d)", status);
}

int kiln_cli_launch(int argc, char **argv) {
    int nproc = 0;
    const char *addr = "127.0.0.1", *port_arg = NULL;
    int i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return -1;
        if (i + 1 < argc && !strcmp(argv[i], "--nproc")) nproc = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--master-addr")) addr = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--master-port")) port_arg = argv[++i];
        else {
            fprintf(stderr, "kiln launch: unknown option '%s' (the command goes after --)\n", argv[i]);
            return 2;
        }
    }
    if (nproc < 1 || nproc > 1024 || i >= argc) {
        fprintf(stderr, "kiln launch: need --nproc N (1..1024) and a command after --\n");
        return 2;
    }
    char port[16];
    if (port_arg) snprintf(port, sizeof port, "%s", port_arg);
    else {
        int p = free_port();
        if (p < 0) {
            fprintf(stderr, "kiln launch: no free TCP port for the rendezvous: %s (give --master-port)\n", strerror(errno));
            return 1;
        }
        snprintf(port, sizeof port, "%d", p);
    }
    char **cmd = argv + i;
    pid_t *pids = calloc((size_t)nproc, sizeof *pids);
    if (!pids) {
        fprintf(stderr, "kiln launch: out of memory\n");
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    fflush(stdout);
    fflush(stderr);
    int started = 0, rc = 0;
    for (int r = 0; r < nproc; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "kiln launch: fork for rank %d: %s\n", r, strerror(errno));
            rc = 1;
            break;
        }
        if (pid == 0) {
            char v[16];
            snprintf(v, sizeof v, "%d", r);
            setenv("RANK", v, 1);
            setenv("LOCAL_RANK", v, 1);
            snprintf(v, sizeof v, "%d", nproc);
            setenv("WORLD_SIZE", v, 1);
            setenv("LOCAL_WORLD_SIZE", v, 1);
            setenv("MASTER_ADDR", addr, 1);
            setenv("MASTER_PORT", port, 1);
            setpgid(0, 0); /* its own group: stopping a rank stops what it started */
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGHUP, SIG_DFL);
            execvp(cmd[0], cmd);
            fprintf(stderr, "kiln launch: rank %d: cannot run %s: %s\n", r, cmd[0], strerror(errno));
            _exit(127);
        }
        setpgid(pid, pid); /* as the child does: no race with a signal sent to the group */
        pids[r] = pid;
        started++;
    }
    int alive = started, failed_rank = -1;
    double kill_at = 0;
    while (alive > 0) {
        if (forward_sig) {
            const int sig = forward_sig;
            forward_sig = 0;
            for (int r = 0; r < started; r++)
                if (pids[r] > 0) kill(-pids[r], sig);
            if (!rc) rc = 128 + sig;
        }
        if (rc && kill_at == 0) {
            /* stop the rest: SIGTERM now, SIGKILL in 5 s */
            for (int r = 0; r < started; r++)
                if (pids[r] > 0) kill(-pids[r], SIGTERM);
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            kill_at = (double)ts.tv_sec + 5;
        }
        if (kill_at > 0) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            if ((double)ts.tv_sec >= kill_at) {
                for (int r = 0; r < started; r++)
                    if (pids[r] > 0) kill(-pids[r], SIGKILL);
            }
        }
        int status = 0;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid == 0 || (pid < 0 && errno == EINTR)) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (pid < 0) break;
        int r = 0;
        while (r < started && pids[r] != pid) r++;
        if (r == started) continue;
        pids[r] = -1;
        alive--;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && failed_rank < 0 && !rc) {
            char how[96];
            describe(how, sizeof how, status);
            fprintf(stderr, "kiln launch: rank %d of %d (pid %d) %s: stopping the other ranks\n", r, nproc, (int)pid, how);
            failed_rank = r;
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
    }
    free(pids);
    return rc;
}

int kiln_cli_dist_setup(kiln_context *ctx, kiln_train_options *o, kiln_loader_options *lo, double timeout_s,
                        double bucket_mb, int drop_last, kiln_dist **out) {
    *out = NULL;
    if (!kiln_dist_launched()) return 0;
    kiln_dist_options dopt = KILN_DIST_OPTIONS_INIT;
    dopt.device = o->device;
    dopt.device_index = -1;
    dopt.timeout_s = timeout_s;
    if (kiln_dist_create(ctx, &dopt, out)) {
        fprintf(stderr, "kiln train: %s\n", kiln_context_message(ctx));
        return 1;
    }
    kiln_dist *d = *out;
    o->dist = d;
    if (o->device == KILN_DEVICE_CUDA) o->device_index = kiln_dist_local_rank(d);
    o->bucket_bytes = bucket_mb > 0 ? (size_t)(bucket_mb * 1048576.0) : 0;
    o->drop_last = drop_last;
    lo->shard_rank = kiln_dist_rank(d);
    lo->shard_count = kiln_dist_size(d);
    lo->shard_drop = drop_last != 0;
    fprintf(stderr, "kiln train: rank %d of %d (local rank %d)%s\n", kiln_dist_rank(d), kiln_dist_size(d),
            kiln_dist_local_rank(d), kiln_dist_rank(d) ? ": its output goes to /dev/null, errors to stderr" : "");
    return 0;
}
