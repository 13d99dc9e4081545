/* Async requests: completion, cancellation across the ABI, and free with
 * requests in flight (each callback exactly once). */
#include <pthread.h>
#include "harness.h"

struct result {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    mcphost_status status;
    char response[4096];
};

static void on_done(void *ud, mcphost_status status, const char *response_json, const char *error) {
    (void)error;
    struct result *r = ud;
    pthread_mutex_lock(&r->mu);
    r->calls++;
    r->status = status;
    snprintf(r->response, sizeof r->response, "%s", response_json ? response_json : "");
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static int wait_for(struct result *r, int ms) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) { t.tv_sec++; t.tv_nsec -= 1000000000L; }
    pthread_mutex_lock(&r->mu);
    while (r->calls == 0) {
        if (pthread_cond_timedwait(&r->cv, &r->mu, &t) != 0) break;
    }
    int calls = r->calls;
    pthread_mutex_unlock(&r->mu);
    return calls;
}

#define RESULT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, MCPHOST_OK, {0}}

int main(void) {
    mcphost *h = open_handle(NULL);
    char *err = NULL;

    struct result ok = RESULT;
    mcphost_call *call = NULL;
    CHECK_STATUS(mcphost_request_async(h, "{\"id\": 5, \"method\": \"tools/call\", \"params\": {\"name\": \"ts__add\", \"arguments\": {\"a\": 2, \"b\": 3}}}", on_done, &ok, &call, &err), MCPHOST_OK, err);
    CHECK(wait_for(&ok, 10000) == 1, "completed");
    CHECK(ok.status == MCPHOST_OK && contains(ok.response, "\"sum\":5"), "%s", ok.response);
    CHECK_STATUS(mcphost_cancel(call), MCPHOST_OK, NULL); /* after completion: nothing happens */
    /* A window for a wrong second callback: nothing to wait for when none comes. */
    sleep_ms(50);
    CHECK(ok.calls == 1, "exactly one callback (%d)", ok.calls);
    mcphost_call_free(call);

    /* A bad request fails at once and never calls back. */
    struct result bad = RESULT;
    CHECK_STATUS(mcphost_request_async(h, "[1]", on_done, &bad, NULL, &err), MCPHOST_ERR_INVALID_JSON, err);
    mcphost_string_free(err);
    CHECK_STATUS(mcphost_request_async(h, "{\"method\": \"ping\"}", NULL, NULL, NULL, &err), MCPHOST_ERR_NULL_ARGUMENT, err);
    mcphost_string_free(err);

    /* Cancellation of a 20 s call returns at once; the server is told. */
    struct result slow = RESULT;
    int started = in_flight_count(h, "slow"); /* a daemon may be shared */
    double t0 = now_ms();
    CHECK_STATUS(mcphost_request_async(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__slow\", \"arguments\": {\"ms\": 20000}}}", on_done, &slow, &call, &err), MCPHOST_OK, err);
    wait_in_flight(h, "slow", started + 1);
    CHECK(slow.calls == 0, "still running");
    CHECK_STATUS(mcphost_cancel(call), MCPHOST_OK, NULL);
    CHECK(wait_for(&slow, 5000) == 1, "cancelled callback");
    CHECK(slow.status == MCPHOST_ERR_CANCELLED, "status %s", mcphost_status_name(slow.status));
    CHECK(now_ms() - t0 < 5000, "cancelled quickly (%.0f ms)", now_ms() - t0);
    CHECK_STATUS(mcphost_cancel(call), MCPHOST_OK, NULL);
    mcphost_call_free(call);
    /* A window for a wrong second callback (see above). */
    sleep_ms(100);
    CHECK(slow.calls == 1, "one callback after two cancels (%d)", slow.calls);

    /* The handle still works. */
    char *resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__echo\", \"arguments\": {\"text\": \"after cancel\"}}}", MCPHOST_OK);
    CHECK(contains(resp, "after cancel"), "%s", resp);
    mcphost_string_free(resp);

    /* A request timeout (from the options) is MCPHOST_ERR_TIMEOUT. */
    mcphost_options *o = mcphost_options_new();
    mcphost_options_set_request_timeout_ms(o, 300);
    mcphost *quick = open_handle(o);
    mcphost_options_free(o);
    resp = request(quick, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__slow\", \"arguments\": {\"ms\": 5000}}}", MCPHOST_ERR_TIMEOUT);
    CHECK(resp == NULL, "no response on timeout");
    mcphost_free(quick);

    /* Freeing the handle ends requests in flight with MCPHOST_ERR_CLOSED,
     * before mcphost_free returns. */
    struct result inflight = RESULT;
    started = in_flight_count(h, "slow");
    CHECK_STATUS(mcphost_request_async(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__slow\", \"arguments\": {\"ms\": 20000}}}", on_done, &inflight, NULL, &err), MCPHOST_OK, err);
    wait_in_flight(h, "slow", started + 1);
    mcphost_free(h);
    CHECK(inflight.calls == 1, "callback ran before free returned (%d)", inflight.calls);
    CHECK(inflight.status == MCPHOST_ERR_CLOSED, "status %s", mcphost_status_name(inflight.status));
    return finish("test_cancel");
}
