/* Signals that end a run (SIGINT, SIGTERM, SIGHUP) and the output files a
 * run has staged. The signals are blocked in every thread of the process
 * from the start of main (threads inherit the mask: OpenMP's workers, MPI's
 * progress threads), and one thread waits for them with sigwait. So a
 * signal never runs a handler on some idle worker in the middle of a
 * commit: the waiting thread takes the commit lock first, which a commit
 * holds while it moves its files, then removes the temporaries of every
 * set still open and ends the process by the same signal.
 *
 * SIGXFSZ (a write past `ulimit -f`) is ignored instead, so the write fails
 * with EFBIG and the command reports it and removes its temporaries like any
 * failed write. */
#include "cli.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define MAX_LIVE 4
static const int ending[] = {SIGINT, SIGTERM, SIGHUP};
#define NENDING (int)(sizeof ending / sizeof ending[0])

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the live sets; a commit */
static attn_outputs *live[MAX_LIVE];
static sigset_t waited;     /* the ending signals not ignored on entry (nohup) */
static bool have_waiter;    /* else: handlers, the fallback */
static _Atomic int taken;   /* the waiting thread has a signal */

static void remove_live(void)
{
    for (int i = 0; i < MAX_LIVE; ++i)
        if (live[i]) attn_outputs_remove_temporaries(live[i]);
}

static void end_by(int sig)
{
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    _exit(128 + sig);
}

static void *wait_for_signal(void *unused)
{
    (void)unused;
    int sig = 0;
    while (sigwait(&waited, &sig) != 0) {
    }
    taken = 1;
    pthread_mutex_lock(&lock); /* a commit in progress finishes first */
    remove_live();
    end_by(sig);
    return NULL;
}

/* Without the waiting thread (it could not be created): a handler, which
 * may run on any thread. */
static void on_signal(int sig)
{
    remove_live();
    end_by(sig);
}

void cli_signals_init(void)
{
    signal(SIGXFSZ, SIG_IGN);
    sigemptyset(&waited);
    for (int i = 0; i < NENDING; ++i) {
        struct sigaction old;
        /* keep an inherited "ignore" (nohup) */
        if (sigaction(ending[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaddset(&waited, ending[i]);
    }
    sigset_t previous;
    pthread_sigmask(SIG_BLOCK, &waited, &previous);
    pthread_attr_t attr;
    pthread_t waiter;
    if (pthread_attr_init(&attr) == 0) {
        pthread_attr_setstacksize(&attr, 1 << 16); /* it only unlinks files */
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        have_waiter = pthread_create(&waiter, &attr, wait_for_signal, NULL) == 0;
        pthread_attr_destroy(&attr);
    }
    if (have_waiter) return;
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_mask = waited;
    for (int i = 0; i < NENDING; ++i)
        if (sigismember(&waited, ending[i])) sigaction(ending[i], &sa, NULL);
}

void cli_signals_track(attn_outputs *set, bool on)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_LIVE; ++i)
        if (on ? !live[i] : live[i] == set) {
            live[i] = on ? set : NULL;
            break;
        }
    pthread_mutex_unlock(&lock);
}

void cli_signals_hold(bool hold)
{
    static sigset_t before; /* the fallback: blocked in this thread only */
    if (hold) {
        pthread_mutex_lock(&lock);
        if (!have_waiter) pthread_sigmask(SIG_BLOCK, &waited, &before);
    } else if (!have_waiter) {
        pthread_sigmask(SIG_SETMASK, &before, NULL);
        pthread_mutex_unlock(&lock);
    } else {
        /* A signal that came during the commit ends the process now, by
         * the waiting thread, rather than racing the exit that follows. */
        sigset_t pending;
        bool ending_now = taken;
        if (!ending_now && sigpending(&pending) == 0)
            for (int i = 0; i < NENDING && !ending_now; ++i)
                ending_now = sigismember(&waited, ending[i]) && sigismember(&pending, ending[i]);
        pthread_mutex_unlock(&lock);
        if (ending_now)
            for (;;) pause(); /* the waiting thread ends the process */
    }
}
