/*
 * -l / -lms: run the command every interval until SIGINT or SIGTERM, which end the loop cleanly
 * (exit 0, output flushed). The interval is measured start to start on the monotonic clock, so the
 * samples do not drift (loop.txt: one second apart to the millisecond).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "smi.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

int run_loop(const struct opts *o, int (*fn)(const struct opts *o, int first))
{
    struct sigaction sa;
    struct timespec next;
    int rc;
    if (o->loop_ms <= 0)
        return fn(o, 1);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: the sleep returns at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (int first = 1; !stop; first = 0) {
        rc = fn(o, first);
        fflush(smi_out);
        if (rc != RC_OK)
            return rc;
        next.tv_sec += o->loop_ms / 1000;
        next.tv_nsec += o->loop_ms % 1000 * 1000000L;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000L;
        }
        while (!stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
            ;
    }
    return RC_OK;
}
