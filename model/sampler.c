/* Sampler (see sampler.h for the step order). State per sampler: RNG, history ring, work buffers; one
 * caller thread at a time, no shared mutable state between samplers. */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float l;    /* logit */
    int32_t id;
} cand;

struct mdl_sampler {
    mdl_sampler_params p;
    int32_t n_vocab;
    cand *c;          /* n_vocab candidates (work space) */
    uint32_t *count;  /* n_vocab occurrence counts, all zero between calls */
    int32_t *hist;    /* ring of the last repeat_last_n accepted tokens */
    int32_t hist_n, hist_head;
    uint64_t rng[4];  /* xoshiro256** state */
};

mdl_sampler_params mdl_sampler_default_params(void)
{
    return (mdl_sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                .repeat_penalty = 1.0f, .freq_penalty = 0.0f, .presence_penalty = 0.0f,
                                .repeat_last_n = 64, .min_keep = 1, .seed = 0x6d656d7261ULL};
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

void mdl_sampler_reset(mdl_sampler *s)
{
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    s->hist_n = s->hist_head = 0;
}

mdl_sampler *mdl_sampler_create(const mdl_sampler_params *p, int32_t n_vocab, dev_err *err)
{
    const char *bad = NULL;
    if (!p)
        bad = "params: NULL";
    else if (n_vocab <= 0)
        bad = "n_vocab: must be > 0";
    else if (!isfinite(p->temperature))
        bad = "temperature: must be finite (<= 0 = greedy)";
    else if (!(p->top_p > 0.0f))
        bad = "top_p: must be in (0, 1] (>= 1 = off)";
    else if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        bad = "min_p: must be in [0, 1] (0 = off)";
    else if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty))
        bad = "repeat_penalty: must be > 0 (1 = off)";
    else if (!isfinite(p->freq_penalty) || !isfinite(p->presence_penalty))
        bad = "freq_penalty/presence_penalty: must be finite (0 = off)";
    else if (p->repeat_last_n < 0 || p->repeat_last_n > (1 << 20))
        bad = "repeat_last_n: must be in [0, 1048576] (0 = off)";
    else if (p->min_keep < 1)
        bad = "min_keep: must be >= 1";
    if (bad) {
        dev_err_set(err, MEMRA_E_INVAL, "sampler %s", bad);
        return NULL;
    }
    mdl_sampler *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    s->hist = malloc((size_t)(p->repeat_last_n ? p->repeat_last_n : 1) * sizeof *s->hist);
    if (!s->c || !s->count || !s->hist)
        goto nomem;
    mdl_sampler_reset(s);
    return s;
nomem:
    mdl_sampler_destroy(s);
    dev_err_set(err, MEMRA_E_NOMEM, "sampler: work space for %d candidates", n_vocab);
    return NULL;
}

void mdl_sampler_destroy(mdl_sampler *s)
{
    if (!s)
        return;
    free(s->c);
    free(s->count);
    free(s->hist);
    free(s);
}

void mdl_sampler_accept(mdl_sampler *s, int32_t token)
{
    if (!s || s->p.repeat_last_n == 0 || token < 0 || token >= s->n_vocab)
        return;
    s->hist[s->hist_head] = token;
    s->hist_head = (s->hist_head + 1) % s->p.repeat_last_n;
    if (s->hist_n < s->p.repeat_last_n)
        s->hist_n++;
}

/* Two passes the compiler vectorizes (16 running maxima, then the first 16-block holding the largest), time
 * spent between one decode step and the next (memra-bench sample, docs/bench/cpu.md). A NaN
 * compares false, so it never becomes a maximum; -0.0 == +0.0, so of equal values the lowest index wins, as
 * in a one-pass scan. Only -infinity and NaN everywhere -> no index holds `best` > -inf: the second pass
 * then finds the first -infinity, or none (-1). */
int32_t mdl_argmax(const float *x, int32_t n)
{
    enum { L = 16 };
    float m[L];
    for (int k = 0; k < L; k++)
        m[k] = -INFINITY;
    int32_t i = 0;
    for (; i + L <= n; i += L)
        for (int k = 0; k < L; k++)
            m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
    float best = -INFINITY;
    for (int k = 0; k < L; k++)
        best = m[k] > best ? m[k] : best;
    for (; i < n; i++)
        best = x[i] > best ? x[i] : best;
    for (i = 0; i + L <= n; i += L) { /* the first block holding best (an OR over 16 compares), then in it */
        int hit = 0;
        for (int k = 0; k < L; k++)
            hit |= x[i + k] == best;
        if (hit)
            break;
    }
    for (; i < n; i++)
        if (x[i] == best)
            return i;
    return -1; /* n <= 0, or every value NaN */
}

/* Logit i as a candidate: NaN counts as -inf. */
static cand cand_of(const float *logits, int32_t i)
{
    return (cand){logits[i] == logits[i] ? logits[i] : -INFINITY, i};
}

/* a ranks before b: higher logit, then lower id */
static int before(const cand *a, const cand *b) { return a->l > b->l || (a->l == b->l && a->id < b->id); }

static int cmp_cand(const void *x, const void *y)
{
    const cand *a = x, *b = y;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* Keep the k best of n candidates in c[0..k), sorted best first: a min-heap of k, O(n log k). The candidates
 * are c[0..n) in id order (c[i].id == i, in place), or with logits != NULL logit i as candidate i (NaN as
 * -inf): the same answer without first copying a whole vocabulary into c. Candidate i comes after every id
 * in the heap, so it beats the root only with a strictly larger logit (a tie goes to the lower id, and a
 * NaN compares false): one float compare rejects most of a vocabulary. */
static void top_k_sorted(cand *c, const float *logits, int32_t n, int32_t k)
{
    for (int32_t i = 0; i < k; i++) { /* heap in c[0..k): root = worst kept */
        const cand x = logits ? cand_of(logits, i) : c[i];
        int32_t j = i;
        while (j > 0 && before(&c[(j - 1) / 2], &x)) {
            c[j] = c[(j - 1) / 2];
            j = (j - 1) / 2;
        }
        c[j] = x;
    }
    float root = c[0].l;
    for (int32_t i = k; i < n; i++) {
        const float l = logits ? logits[i] : c[i].l;
        if (!(l > root))
            continue;
        const cand x = {l, i};
        int32_t j = 0;
        for (;;) { /* sift x down from the root */
            int32_t ch = 2 * j + 1, m = j;
            const cand *w = &x;
            if (ch < k && before(w, &c[ch])) {
                m = ch;
                w = &c[ch];
            }
            if (ch + 1 < k && before(w, &c[ch + 1]))
                m = ch + 1;
            if (m == j)
                break;
            c[j] = c[m];
            j = m;
        }
        c[j] = x;
        root = c[0].l;
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
}

int32_t mdl_sampler_sample(mdl_sampler *s, const float *logits)
{
    if (!s || !logits)
        return MEMRA_E_INVAL;
    const mdl_sampler_params *p = &s->p;
    int32_t n = s->n_vocab;
    const int penalize =
        s->hist_n && (p->repeat_penalty != 1.0f || p->freq_penalty != 0.0f || p->presence_penalty != 0.0f);
    if (p->temperature <= 0.0f && !penalize) { /* greedy on the logits as they are: no candidate list */
        int32_t best = mdl_argmax(logits, n);
        return best < 0 || logits[best] == -INFINITY ? MEMRA_E_INVAL : best;
    }
    cand *c = s->c;
    int32_t keep = p->min_keep < n ? p->min_keep : n, best = 0;
    const int top_k = p->top_k > 0 && p->top_k < n;
    const int32_t k = p->top_k > keep ? p->top_k : keep; /* the candidates top-k keeps */
    int sorted = 0;
    if (!penalize && top_k) { /* steps 1-3 at once: top-k straight from the logits */
        top_k_sorted(c, logits, n, k);
        if (c[0].l == -INFINITY)
            return MEMRA_E_INVAL;
        n = k;
        sorted = 1;
    } else {
        for (int32_t i = 0; i < n; i++)
            c[i] = cand_of(logits, i);
        /* 1. penalties */
        if (penalize) {
            for (int32_t i = 0; i < s->hist_n; i++)
                s->count[s->hist[i]]++;
            for (int32_t i = 0; i < s->hist_n; i++) {
                int32_t t = s->hist[i];
                uint32_t cnt = s->count[t];
                if (!cnt)
                    continue; /* already penalized */
                float l = c[t].l;
                l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
                c[t].l = l - (float)cnt * p->freq_penalty - p->presence_penalty;
                s->count[t] = 0;
            }
        }
        /* 2. greedy */
        for (int32_t i = 1; i < n; i++)
            if (before(&c[i], &c[best]))
                best = i;
        if (c[best].l == -INFINITY)
            return MEMRA_E_INVAL;
        if (p->temperature <= 0.0f)
            return c[best].id;
        /* 3. top-k */
        if (top_k) {
            top_k_sorted(c, NULL, n, k);
            n = k;
            sorted = 1;
            best = 0; /* c was reordered: the best is first */
        }
    }
    /* 4. top-p */
    if (p->top_p < 1.0f) {
        if (!sorted)
            qsort(c, (size_t)n, sizeof *c, cmp_cand);
        sorted = 1;
        double sum = 0.0, cum = 0.0;
        for (int32_t i = 0; i < n; i++)
            sum += exp((double)c[i].l - c[0].l);
        for (int32_t i = 0; i < n; i++) {
            cum += exp((double)c[i].l - c[0].l) / sum;
            if (cum >= p->top_p && i + 1 >= keep) {
                n = i + 1;
                break;
            }
        }
    }
    /* 5. min-p: p >= min_p * p_max  <=>  l >= l_max + log(min_p) */
    if (p->min_p > 0.0f) {
        double cut = (double)c[sorted ? 0 : best].l + log((double)p->min_p);
        int32_t w = 0;
        for (int32_t i = 0; i < n; i++) /* count survivors first: min_keep may need the best few */
            w += (double)c[i].l >= cut;
        if (w < keep && !sorted) {
            qsort(c, (size_t)n, sizeof *c, cmp_cand);
            sorted = 1;
        }
        if (sorted) {
            w = 0;
            while (w < n && (w < keep || (double)c[w].l >= cut))
                w++;
        } else { /* keep order, drop below the cut */
            w = 0;
            for (int32_t i = 0; i < n; i++)
                if ((double)c[i].l >= cut)
                    c[w++] = c[i];
        }
        n = w;
    }
    /* 6. temperature, softmax, draw */
    float lmax = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (c[i].l > lmax)
            lmax = c[i].l;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        sum += exp(((double)c[i].l - lmax) / p->temperature);
    double u = (double)(rng_next(s->rng) >> 11) * 0x1.0p-53 * sum, cum = 0.0;
    int32_t pick = -1;
    for (int32_t i = 0; i < n; i++) {
        double w = exp(((double)c[i].l - lmax) / p->temperature);
        if (w <= 0.0)
            continue;
        pick = i;
        cum += w;
        if (u < cum)
            break;
    }
    return pick >= 0 ? c[pick].id : c[best].id;
}
