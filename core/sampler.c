/*
 * sampler.c - the next-token sampler declared in sampler.h: repetition
 * penalty, temperature, top-k, top-p, min-p, and the seeded RNG.
 *
 * Order of the steps (the Hugging Face / vLLM order, so a seed-free
 * comparison of the kept set against either is meaningful):
 *   1. repetition penalty (CTRL: a positive logit is divided by the penalty,
 *      a negative one multiplied), once per distinct token of the window;
 *   2. temperature 0 -> one-hot on the argmax (lowest id on ties), done;
 *   3. softmax(logits / temperature);
 *   4. top-k: the k most probable, ties broken towards the lower id;
 *   5. top-p over the top-k set renormalised: the shortest prefix of the
 *      sorted set whose mass reaches top_p (at least one token; top_p 0
 *      keeps only the most probable, 1 or more is off);
 *   6. min-p: drop what is below min_p * the most probable's probability;
 *   7. renormalise.
 *
 * It owns no memory: the caller passes scratch (dsr1_sampler_scratch_size)
 * so the decode loop never allocates. It does not know about sequences, stop
 * tokens or speculation; the engine keeps one dsr1_rng per sequence.
 *
 * Cost: O(vocab) per token plus a sort of the candidates when top-k or top-p
 * is on. To keep that sort small on a 129k vocabulary, one pass buckets the
 * probabilities by octave and only the octaves that provably contain the
 * answer are gathered and sorted (see gather_sorted), which keeps it exact;
 * top-k sorts only its k tokens after a quickselect.
 *
 * Presence/frequency penalties (OpenAI's) are a separate in-place step on
 * the logits (dsr1_sampler_penalize), because they see the generated
 * tokens only, not the window the repetition penalty sees; the engine runs
 * it before both greedy and sampled picks. dsr1_sampler_logprobs reports
 * log-softmax values for the API's logprobs fields.
 *
 * Invariants: NaN logits count as -inf; the distribution always has at least
 * one token (the argmax) even when every logit is -inf.
 */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- RNG ------------------------------------------------------------- */

void dsr1_sampling_default(dsr1_sampling *s)
{
    s->temperature = 0.6f;
    s->top_p = 0.95f;
    s->top_k = 0;
    s->min_p = 0.0f;
    s->repetition_penalty = 1.0f;
    s->repetition_window = 64;
    s->presence_penalty = 0.0f;
    s->frequency_penalty = 0.0f;
    s->seed = 0;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void dsr1_rng_seed(dsr1_rng *r, uint64_t seed)
{
    /* splitmix64 never yields four zero words, the one state xoshiro must
     * not start from. */
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t dsr1_rng_next(dsr1_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double dsr1_rng_uniform(dsr1_rng *r)
{
    /* The top 53 bits: every double in [0,1) on a 2^-53 grid, never 1. */
    return (double)(dsr1_rng_next(r) >> 11) * 0x1.0p-53;
}

/* ---- distribution ------------------------------------------------------ */

typedef struct cand {
    float p;
    int32_t id;
} cand;

size_t dsr1_sampler_scratch_size(int vocab)
{
    /* work[vocab] floats + cand[vocab] (a float and an int each). */
    return (size_t)(vocab > 0 ? vocab : 0) * (sizeof(float) + sizeof(cand));
}

/* Copy logits into work with NaN -> -inf and the repetition penalty applied.
 * A token is penalised only while its work value still equals the logit:
 * applying the penalty changes any non-zero value, and a zero logit is a
 * fixed point, so repeats of a token in the window count once without a
 * mark array. */
static void penalised_logits(const float *logits, int vocab, const dsr1_sampling *s,
                             const int32_t *recent, size_t n_recent, float *work)
{
    for (int i = 0; i < vocab; i++) work[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    float pen = s->repetition_penalty;
    if (!(pen > 0) || pen == 1.0f || !recent) return;
    size_t w = s->repetition_window > 0 ? (size_t)s->repetition_window : n_recent;
    size_t from = n_recent > w ? n_recent - w : 0;
    for (size_t j = from; j < n_recent; j++) {
        int32_t id = recent[j];
        if (id < 0 || id >= vocab || work[id] != logits[id]) continue;
        work[id] = work[id] > 0 ? work[id] / pen : work[id] * pen;
    }
}

/* The lowest id of the largest value (x holds no NaN: penalised_logits
 * made them -inf). Two passes: the largest value 16 lanes at a time, a
 * loop GCC turns into vector maxes, then its first index (-0 == +0, so a
 * zero maximum finds the first zero of either sign, as a strict > scan
 * would). The one-pass scan compared each value with x[best], a chain
 * through memory: 3.6 ns a value, 470 us per 129280-entry vocabulary,
 * against 47-56 us (Zen 4, the two loops alternated in one program):
 * about 0.5% of a decoded token of the 3-layer R1-shape file. */
static int argmax(const float *x, int n)
{
    float lane[16], m = x[0];
    int i = 0;
    for (int k = 0; k < 16; k++) lane[k] = -INFINITY;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) lane[k] = x[i + k] > lane[k] ? x[i + k] : lane[k];
    for (int k = 0; k < 16; k++) m = lane[k] > m ? lane[k] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    for (i = 0; i < n; i++)
        if (x[i] == m) return i;
    return 0;
}

/* work <- softmax(work / temperature); returns the max probability. */
static float softmax_t(float *work, int vocab, float temperature, int amax)
{
    float mx = work[amax];
    double sum = 0;
    for (int i = 0; i < vocab; i++) {
        float e = expf((work[i] - mx) / temperature);
        work[i] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < vocab; i++) work[i] *= inv;
    return work[amax];
}

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Put the k first tokens in cand_cmp order into c[0..k) (quickselect;
 * cand_cmp is a total order because ids are distinct). */
static void select_top(cand *c, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        cand pivot = c[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cand_cmp(&c[i], &pivot) < 0) i++;
            while (cand_cmp(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

#define OCTAVES 64

/*
 * Gather into c, sorted by (p desc, id asc), a set of tokens that surely
 * contains everything top-k / top-p can keep, and return its size (top-k:
 * exactly the k best). One pass sorts the probabilities into octaves below
 * the maximum (octave b: p/pmax in [2^-(b+1), 2^-b)); the fewest top octaves
 * holding k tokens, or without top-k top_p of the total mass, must contain
 * the kept set, so only those are gathered and sorted. The floor is one
 * octave lower still, so float rounding at an octave edge cannot drop a
 * token. The last octave takes everything below: floor 0.
 */
static int gather_sorted(const float *work, int vocab, float pmax, int top_k, float top_p,
                         double total, cand *c)
{
    double mass[OCTAVES] = {0};
    int count[OCTAVES] = {0};
    float inv = 1.0f / pmax;
    for (int i = 0; i < vocab; i++) {
        if (!(work[i] > 0)) continue;
        int e;
        frexpf(work[i] * inv, &e);
        int b = -e < 0 ? 0 : -e > OCTAVES - 1 ? OCTAVES - 1 : -e;
        mass[b] += work[i];
        count[b]++;
    }
    int top = 0, have = 0;
    double m = 0;
    for (; top < OCTAVES - 1; top++) {
        m += mass[top];
        have += count[top];
        if (top_k > 0 ? have >= top_k : m >= top_p * total) break;
    }
    float floor = top + 2 < OCTAVES - 1 ? ldexpf(pmax, -(top + 2)) : 0;
    int n = 0;
    for (int i = 0; i < vocab; i++) {
        if (work[i] > 0 && work[i] >= floor) {
            c[n].p = work[i];
            c[n].id = i;
            n++;
        }
    }
    if (top_k > 0 && n > top_k) {
        select_top(c, n, top_k);
        n = top_k;
    }
    qsort(c, (size_t)n, sizeof *c, cand_cmp);
    return n;
}

/* Steps 4-7 on a sorted candidate list; returns the kept count and leaves
 * c[0..n) normalised. `total` is the mass of the whole distribution: the
 * list may hold only the head of it (gather_sorted), and without top-k the
 * top-p threshold is a fraction of everything, not of the head. */
static int truncate_sorted(cand *c, int n, double total, const dsr1_sampling *s)
{
    double z = total;
    if (s->top_k > 0 && n >= s->top_k) {
        n = s->top_k;
        z = 0;
        for (int i = 0; i < n; i++) z += c[i].p;
    }
    if (s->top_p >= 0 && s->top_p < 1) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= s->top_p * z) {
                n = i + 1;
                break;
            }
        }
    }
    if (s->min_p > 0) {
        float floor = s->min_p * c[0].p;
        while (n > 1 && c[n - 1].p < floor) n--;
    }
    z = 0;
    for (int i = 0; i < n; i++) z += c[i].p;
    for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / z);
    return n;
}

/* The whole pipeline; leaves the dense distribution in probs[vocab]. probs
 * may be the scratch's own work area: every branch has finished reading
 * work before it writes probs (the min-p-only branch elementwise). */
static void compute_probs(const float *logits, int vocab, const dsr1_sampling *s,
                          const int32_t *recent, size_t n_recent, float *probs,
                          void *scratch)
{
    float *work = scratch;
    cand *c = (cand *)(work + vocab);
    penalised_logits(logits, vocab, s, recent, n_recent, work);
    int amax = argmax(work, vocab);
    if (!(s->temperature > 0) || work[amax] == -INFINITY) {
        memset(probs, 0, (size_t)vocab * sizeof *probs);
        probs[amax] = 1.0f;
        return;
    }
    float pmax = softmax_t(work, vocab, s->temperature, amax);
    int sorted = s->top_k > 0 || (s->top_p >= 0 && s->top_p < 1);
    if (!sorted) {
        /* Only min-p (or nothing): a threshold, no order needed. */
        float floor = s->min_p > 0 ? s->min_p * pmax : 0;
        double z = 0;
        for (int i = 0; i < vocab; i++)
            if (work[i] >= floor) z += work[i];
        float inv = (float)(1.0 / z);
        for (int i = 0; i < vocab; i++) probs[i] = work[i] >= floor ? work[i] * inv : 0;
        return;
    }
    double total = 0;
    for (int i = 0; i < vocab; i++) total += work[i];
    int n = gather_sorted(work, vocab, pmax, s->top_k, s->top_p, total, c);
    n = truncate_sorted(c, n, total, s);
    memset(probs, 0, (size_t)vocab * sizeof *probs);
    for (int i = 0; i < n; i++) probs[c[i].id] = c[i].p;
}

void dsr1_sampler_probs(const float *logits, int vocab, const dsr1_sampling *s,
                        const int32_t *recent, size_t n_recent, float *probs,
                        void *scratch)
{
    compute_probs(logits, vocab, s, recent, n_recent, probs, scratch);
}

int32_t dsr1_sampler_draw(const float *probs, int vocab, dsr1_rng *rng)
{
    /* Inverse CDF in id order, scaled by the actual total so rounding in
     * the caller's normalisation cannot push the draw off the end. */
    double total = 0;
    int last = 0;
    for (int i = 0; i < vocab; i++) {
        if (probs[i] > 0) {
            total += probs[i];
            last = i;
        }
    }
    double u = dsr1_rng_uniform(rng) * total, cum = 0;
    for (int i = 0; i < vocab; i++) {
        if (!(probs[i] > 0)) continue;
        cum += probs[i];
        if (u < cum) return i;
    }
    return last;
}

int32_t dsr1_sampler_sample(const float *logits, int vocab, const dsr1_sampling *s,
                            const int32_t *recent, size_t n_recent, dsr1_rng *rng,
                            void *scratch)
{
    float *work = scratch;
    if (!(s->temperature > 0)) {
        penalised_logits(logits, vocab, s, recent, n_recent, work);
        return argmax(work, vocab);
    }
    /* The dense distribution overwrites the work area, and the draw is the
     * public one, so sample == draw(probs) for the same RNG state: the
     * speculative decoder and the plain path agree token for token. */
    compute_probs(logits, vocab, s, recent, n_recent, work, scratch);
    float *probs = work;
    return dsr1_sampler_draw(probs, vocab, rng);
}

/* ---- OpenAI penalties and logprobs ---------------------------------------- */

void dsr1_sampler_penalize(float *logits, int vocab, const dsr1_sampling *s,
                           const int32_t *out, size_t n_out, void *scratch)
{
    if ((s->presence_penalty == 0 && s->frequency_penalty == 0) || !out || !n_out) return;
    /* Counts live in the scratch (vocab ints fit in its work area); only
     * the ids that occur are zeroed, counted and read back. */
    int32_t *count = scratch;
    for (size_t j = 0; j < n_out; j++)
        if (out[j] >= 0 && out[j] < vocab) count[out[j]] = 0;
    for (size_t j = 0; j < n_out; j++)
        if (out[j] >= 0 && out[j] < vocab) count[out[j]]++;
    for (size_t j = 0; j < n_out; j++) {
        int32_t id = out[j];
        if (id < 0 || id >= vocab || count[id] == 0) continue;
        logits[id] -= s->frequency_penalty * (float)count[id] + s->presence_penalty;
        count[id] = 0; /* once per distinct token */
    }
}

float dsr1_sampler_logprobs(const float *logits, int vocab, int32_t tok, int k,
                            int32_t *top_ids, float *top_lp)
{
    if (k > DSR1_MAX_TOP_LOGPROBS) k = DSR1_MAX_TOP_LOGPROBS;
    if (k < 0) k = 0;
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    if (mx == -INFINITY) mx = 0;
    double sum = 0;
    for (int i = 0; i < vocab; i++)
        if (!isnan(logits[i])) sum += exp((double)logits[i] - mx);
    float lse = mx + (float)log(sum);
    /* Top k by insertion into a sorted list; a strict > keeps the lower
     * id first on ties because ids are visited in order. */
    int have = 0;
    for (int i = 0; i < vocab && k; i++) {
        float v = isnan(logits[i]) ? -INFINITY : logits[i];
        if (have == k && !(v > top_lp[k - 1])) continue;
        int at = have < k ? have++ : k - 1;
        while (at > 0 && v > top_lp[at - 1]) {
            top_lp[at] = top_lp[at - 1];
            top_ids[at] = top_ids[at - 1];
            at--;
        }
        top_lp[at] = v;
        top_ids[at] = i;
    }
    for (int i = 0; i < have; i++) top_lp[i] -= lse;
    float v = tok >= 0 && tok < vocab && !isnan(logits[tok]) ? logits[tok] : -INFINITY;
    return v - lse;
}
