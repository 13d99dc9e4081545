/* Host callbacks: an elicitation answered later from another thread, a
 * responder freed unanswered, sampling, roots, and the callback thread's
 * rules (no blocking request on it; free_user_data called once). */
#include <pthread.h>
#include "harness.h"

static int freed = 0;
static void free_counter(void *ud) { (void)ud; __atomic_add_fetch(&freed, 1, __ATOMIC_SEQ_CST); }

static void *answer_later(void *arg) {
    mcphost_responder *r = arg;
    /* The scenario: answered a while after the callback returned. */
    sleep_ms(100);
    char *err = NULL;
    mcphost_status st = mcphost_responder_result(r, "{\"action\": \"accept\", \"content\": {\"name\": \"from another thread\"}}", &err);
    CHECK_STATUS(st, MCPHOST_OK, err);
    /* Exactly once. */
    st = mcphost_responder_result(r, "{\"action\": \"decline\"}", NULL);
    CHECK_STATUS(st, MCPHOST_ERR_ALREADY_ANSWERED, NULL);
    mcphost_string_free(err);
    mcphost_responder_free(r);
    return NULL;
}

static mcphost *the_handle = NULL;
static int elicit_seen = 0;
static char elicit_server[64];
static void on_elicit(void *ud, const char *request_json, mcphost_responder *r) {
    CHECK(ud == (void *)&elicit_seen, "user_data passed through");
    elicit_seen++;
    const char *s = strstr(request_json, "\"server\":\"");
    if (s) snprintf(elicit_server, sizeof elicit_server, "%.*s", (int)strcspn(s + 10, "\""), s + 10);
    CHECK(contains(request_json, "\"method\":\"elicitation/create\""), "%s", request_json);
    /* A blocking request on the callback thread would deadlock: refused. */
    char *resp = NULL, *err = NULL;
    CHECK_STATUS(mcphost_request(the_handle, "{\"method\": \"ping\"}", &resp, &err), MCPHOST_ERR_ON_CALLBACK_THREAD, err);
    mcphost_string_free(err);
    pthread_t t;
    pthread_create(&t, NULL, answer_later, r);
    pthread_detach(t);
}

static int blocked_status = -1;
static void on_sample(void *ud, const char *request_json, mcphost_responder *r) {
    (void)ud;
    CHECK(contains(request_json, "sampling/createMessage"), "%s", request_json);
    char *resp = NULL;
    blocked_status = (int)mcphost_request(the_handle, "{\"method\": \"tools/list\"}", &resp, NULL);
    mcphost_string_free(resp);
    mcphost_responder_result(r, "{\"role\": \"assistant\", \"content\": {\"type\": \"text\", \"text\": \"sampled in C\"}, \"model\": \"c-test\"}", NULL);
    mcphost_responder_free(r);
}

static void on_roots(void *ud, const char *request_json, mcphost_responder *r) {
    (void)ud;
    (void)request_json;
    /* Freed without an answer: the server gets an error. */
    mcphost_responder_free(r);
}

int main(void) {
    mcphost_options *o = mcphost_options_new();
    CHECK_STATUS(mcphost_options_set_elicitation(o, MCPHOST_ELICITATION_FORM, on_elicit, &elicit_seen, free_counter), MCPHOST_OK, NULL);
    CHECK_STATUS(mcphost_options_set_sampling(o, on_sample, NULL, free_counter), MCPHOST_OK, NULL);
    CHECK_STATUS(mcphost_options_set_roots(o, on_roots, NULL, free_counter), MCPHOST_OK, NULL);
    mcphost *h = open_handle(o);
    the_handle = h;
    mcphost_options_free(o);
    CHECK(freed == 0, "user_data lives while a handle uses it (%d freed)", freed);

    char *resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__elicit\", \"arguments\": {\"message\": \"Your name?\", \"requestedSchema\": {\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}}}}}}", MCPHOST_OK);
    CHECK(elicit_seen == 1, "elicitation callback ran %d times", elicit_seen);
    CHECK(strcmp(elicit_server, "ts") == 0, "the asking server is named: '%s'", elicit_server);
    CHECK(contains(resp, "from another thread"), "the answer reached the server: %s", resp);
    mcphost_string_free(resp);

    /* server-everything's own elicitation tool, answered the same way. */
    resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ev__trigger-elicitation-request\", \"arguments\": {}}}", MCPHOST_OK);
    CHECK(elicit_seen == 2, "server-everything's elicitation reached the host (%d)", elicit_seen);
    CHECK(strcmp(elicit_server, "ev") == 0, "named ev: '%s'", elicit_server);
    mcphost_string_free(resp);

    resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__sample\", \"arguments\": {\"prompt\": \"hi\"}}}", MCPHOST_OK);
    CHECK(contains(resp, "sampled in C"), "%s", resp);
    CHECK(blocked_status == MCPHOST_ERR_ON_CALLBACK_THREAD, "a blocking request on the callback thread: %s",
          mcphost_status_name((mcphost_status)blocked_status));
    mcphost_string_free(resp);

    resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__roots\"}}", MCPHOST_OK);
    CHECK(contains(resp, "without answering") || contains(resp, "isError\":true"), "an unanswered responder is an error for the server: %s", resp);
    mcphost_string_free(resp);

    mcphost_free(h);
    CHECK(freed == 3, "free_user_data called once per callback after the last owner (%d)", freed);
    return finish("test_callbacks");
}
