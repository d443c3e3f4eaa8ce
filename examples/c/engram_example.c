/*
 * engram_example: the C ABI end to end, the way a runtime drives it.
 *
 *   engram_example MODEL TOKENS_FILE DECODE_STEPS [raw|f32]
 *
 * Opens MODEL, prefills the prompt in TOKENS_FILE (whitespace-separated
 * token ids) in micro-batches, then decodes DECODE_STEPS tokens. Between
 * each begin and wait a stand-in compute sleeps for the transformer layers
 * that come before the Engram layer, as a GPU command buffer would run.
 * Every row handed out is checked byte for byte against a synchronous
 * engram_rows_read of the same row ids. Prints the stall statistics and
 * exits non-zero on any error or mismatch.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engram.h"

/* Stand-in model: 43 layers; per-layer compute of one prefill micro-batch
 * and of one decode token. The micro-batch does not divide the ring
 * (2 x 512 tokens), so some waits' rows wrap around it (two parts). */
#define N_LAYERS 43
#define UBATCH 384
#define PREFILL_LAYER_US 400
#define DECODE_LAYER_US 150

static int failures = 0;
static int wrapped = 0;

#define CHECK(call)                                                          \
    do {                                                                     \
        engram_status st_ = (call);                                          \
        if (st_ != ENGRAM_OK) {                                              \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, \
                    #call, engram_status_name((int32_t)st_),                 \
                    engram_last_error());                                    \
            exit(2);                                                         \
        }                                                                    \
    } while (0)

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Blocks until `*deadline` + `us`, then moves the deadline there; a wait
 * that made us late is not paid back by skipping compute. */
static void compute_layer(double *deadline, double us) {
    double t = now_us();
    if (*deadline < t) *deadline = t;
    *deadline += us;
    double left = *deadline - now_us();
    if (left > 0) {
        struct timespec ts = {(time_t)(left / 1e6), (long)((left - (double)(time_t)(left / 1e6) * 1e6) * 1e3)};
        nanosleep(&ts, NULL);
    }
}

static uint32_t *read_tokens(const char *path, size_t *n) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t cap = 1024, len = 0;
    uint32_t *tokens = malloc(cap * sizeof *tokens);
    unsigned long v;
    while (fscanf(f, "%lu", &v) == 1) {
        if (len == cap) tokens = realloc(tokens, (cap *= 2) * sizeof *tokens);
        tokens[len++] = (uint32_t)v;
    }
    fclose(f);
    *n = len;
    return tokens;
}

struct ctx {
    engram_engine *engine;
    engram_info info;
    uint32_t layer_of_table[8];
    uint32_t format;
    size_t row_bytes;
    uint32_t *ids;    /* scratch: row ids of one table's tokens */
    uint8_t *expect;  /* scratch: rows read synchronously */
};

/* Checks `rows` (tokens first..first+n of `table`, whose row ids are in
 * `all_ids`, laid out [token][table][column]) against engram_rows_read. */
static void check_rows(struct ctx *c, const engram_rows *rows, uint32_t table,
                       const uint32_t *all_ids, uint32_t n, const char *what) {
    uint32_t rpt = c->info.rows_per_token;
    size_t k = 0;
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t col = 0; col < rpt; col++)
            c->ids[k++] = all_ids[((size_t)t * c->info.tables + table) * rpt + col];
    size_t bytes = k * c->row_bytes;
    CHECK(engram_rows_read(c->engine, table, c->ids, k, c->format, c->expect, bytes));
    if (rows->n_tokens != n || rows->bytes[0] + rows->bytes[1] != bytes ||
        memcmp(rows->data[0], c->expect, rows->bytes[0]) != 0 ||
        (rows->bytes[1] &&
         memcmp(rows->data[1], c->expect + rows->bytes[0], rows->bytes[1]) != 0)) {
        fprintf(stderr, "MISMATCH: %s table %u (%u tokens)\n", what, table, n);
        failures++;
    }
}

static void prefill(struct ctx *c, engram_seq *seq, const uint32_t *tokens, size_t n,
                    uint8_t *shared) {
    uint32_t tables = c->info.tables, rpt = c->info.rows_per_token;
    uint32_t *ids = malloc(n * tables * rpt * sizeof *ids);
    /* An attention mask as a tokenizer gives it for a left-padded batch
     * row: 0 for the padding, 1 for real tokens (NULL means all real). */
    uint8_t *mask = malloc(n);
    for (size_t i = 0; i < n; i++) mask[i] = i < 3 ? 0 : 1;
    CHECK(engram_seq_row_ids(seq, tokens, n, mask, ids, n * tables * rpt));
    engram_prefill *pf = NULL;
    CHECK(engram_prefill_begin(seq, tokens, n, mask, &pf));
    free(mask);
    double deadline = now_us();
    for (uint32_t from = 0; from < n; from += UBATCH) {
        uint32_t upto = from + UBATCH < n ? from + UBATCH : (uint32_t)n;
        for (uint32_t layer = 0; layer < N_LAYERS; layer++) {
            for (uint32_t t = 0; t < tables; t++) {
                if (c->layer_of_table[t] != layer) continue;
                engram_rows rows;
                if (t % 2 == 0) {
                    /* Engine memory: hand the pointers to the kernel. */
                    CHECK(engram_prefill_wait(pf, t, upto, &rows));
                    wrapped += rows.bytes[1] != 0;
                } else {
                    /* Into a caller buffer (a Metal shared buffer's contents). */
                    size_t written = 0;
                    size_t cap = (size_t)UBATCH * rpt * c->row_bytes;
                    CHECK(engram_prefill_wait_into(pf, t, upto, shared, cap, &written));
                    rows = (engram_rows){{shared, NULL}, {written, 0}, from, upto - from, rpt,
                                         (uint32_t)c->row_bytes, c->format};
                }
                check_rows(c, &rows, t, ids + (size_t)from * tables * rpt, upto - from,
                           "prefill");
            }
            compute_layer(&deadline, PREFILL_LAYER_US);
        }
    }
    CHECK(engram_prefill_end(pf));
    pf = NULL;
    CHECK(engram_prefill_end(pf)); /* NULL: accepted, does nothing */
    free(ids);
}

static void decode(struct ctx *c, engram_seq *seq, const uint32_t *prompt, size_t n,
                   uint32_t steps, uint8_t *shared) {
    uint32_t tables = c->info.tables, rpt = c->info.rows_per_token;
    uint32_t *ids = malloc((size_t)tables * rpt * sizeof *ids);
    double deadline = now_us();
    for (uint32_t s = 0; s < steps; s++) {
        /* The "sampled" token: a walk over the prompt's ids. */
        uint32_t token = prompt[(s * 7919u) % n];
        CHECK(engram_seq_row_ids(seq, &token, 1, NULL, ids, (size_t)tables * rpt));
        CHECK(engram_step_begin(seq, token));
        for (uint32_t layer = 0; layer < N_LAYERS; layer++) {
            for (uint32_t t = 0; t < tables; t++) {
                if (c->layer_of_table[t] != layer) continue;
                engram_rows rows;
                if (t % 2 == 0) {
                    CHECK(engram_step_wait(seq, t, &rows));
                } else {
                    size_t written = 0;
                    CHECK(engram_step_wait_into(seq, t, shared, (size_t)rpt * c->row_bytes,
                                                &written));
                    rows = (engram_rows){{shared, NULL}, {written, 0}, 0, 1, rpt,
                                         (uint32_t)c->row_bytes, c->format};
                }
                check_rows(c, &rows, t, ids, 1, "decode");
            }
            compute_layer(&deadline, DECODE_LAYER_US);
        }
    }
    free(ids);
}

static void print_stall(engram_seq *seq, uint32_t phase, const char *name) {
    engram_stall st;
    CHECK(engram_seq_stall(seq, phase, &st));
    printf("%-8s tokens %6" PRIu64 "  waits %5" PRIu64
           "  stall total %10.1f us  per token: mean %8.2f p50 %8.2f p99 %8.2f max %8.2f us\n",
           name, st.tokens, st.waits, st.total_us, st.mean_us, st.p50_us, st.p99_us, st.max_us);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL TOKENS_FILE DECODE_STEPS [raw|f32]\n", argv[0]);
        return 2;
    }
    size_t n = 0;
    uint32_t *tokens = read_tokens(argv[2], &n);
    uint32_t steps = (uint32_t)strtoul(argv[3], NULL, 10);
    if (n == 0) {
        fprintf(stderr, "%s: no tokens\n", argv[2]);
        return 2;
    }

    struct ctx c = {0};
    engram_options opts;
    CHECK(engram_options_default(&opts));
    opts.format = (argc > 4 && strcmp(argv[4], "f32") == 0) ? ENGRAM_FORMAT_F32 : ENGRAM_FORMAT_RAW;
    opts.cache_bytes = 64u << 20;
    opts.chunk_tokens = 512;
    opts.ring_chunks = 2;
    CHECK(engram_open(argv[1], &opts, &c.engine));
    CHECK(engram_engine_info(c.engine, &c.info));
    if (c.info.tables > 8) {
        fprintf(stderr, "more tables than this example handles\n");
        return 2;
    }
    for (uint32_t t = 0; t < c.info.tables; t++) {
        engram_table ti;
        CHECK(engram_table_info(c.engine, t, &ti));
        c.layer_of_table[t] = ti.layer_id;
        c.row_bytes = ti.row_bytes;
    }
    c.format = c.info.format;
    c.ids = malloc((size_t)UBATCH * c.info.rows_per_token * sizeof *c.ids);
    c.expect = malloc((size_t)UBATCH * c.info.rows_per_token * c.row_bytes);
    uint8_t *shared = malloc((size_t)UBATCH * c.info.rows_per_token * c.row_bytes);
    printf("model %s: %u tables, %u rows per token, %s rows of %zu bytes, vocab %u\n", argv[1],
           c.info.tables, c.info.rows_per_token, c.format == ENGRAM_FORMAT_F32 ? "f32" : "raw",
           c.row_bytes, c.info.vocab_size);

    engram_seq *seq = NULL;
    CHECK(engram_seq_new(c.engine, &seq));
    double t0 = now_us();
    prefill(&c, seq, tokens, n, shared);
    double t1 = now_us();
    decode(&c, seq, tokens, n, steps, shared);
    double t2 = now_us();

    printf("prefill %zu tokens in %.1f ms (%d waits wrapped the ring); decode %u steps in %.1f ms "
           "(%d layers stand-in)\n",
           n, (t1 - t0) / 1e3, wrapped, steps, (t2 - t1) / 1e3, N_LAYERS);
    print_stall(seq, ENGRAM_PHASE_PREFILL, "prefill");
    print_stall(seq, ENGRAM_PHASE_DECODE, "decode");
    if (getenv("ENGRAM_EXAMPLE_JSON")) {
        char *json = NULL;
        CHECK(engram_stats_json(c.engine, &json));
        printf("%s\n", json);
        CHECK(engram_string_free(json));
        json = NULL;
    }

    CHECK(engram_seq_free(seq));
    seq = NULL; /* the documented safe way: free, then NULL */
    CHECK(engram_seq_free(seq));
    CHECK(engram_close(c.engine));
    c.engine = NULL;
    CHECK(engram_close(c.engine));
    free(shared);
    free(c.expect);
    free(c.ids);
    free(tokens);
    if (failures) {
        fprintf(stderr, "%d mismatched waits\n", failures);
        return 1;
    }
    printf("all rows match engram_rows_read\n");
    return 0;
}
