#include "model/draft.h"

int mdl_draft_lookup(const int32_t *hist, int n_hist, int min_ngram, int max_ngram, int window, int32_t *out,
                     int max_draft)
{
    if (!hist || !out || max_draft <= 0 || min_ngram < 1 || max_ngram < min_ngram)
        return 0;
    int lo = window > 0 && n_hist - window > 0 ? n_hist - window : 0;
    for (int n = max_ngram; n >= min_ngram; n--) {
        if (n >= n_hist)
            continue;
        const int32_t *tail = hist + n_hist - n;
        /* the most recent earlier match wins: scan backwards from the position just before the tail */
        for (int start = n_hist - n - 1; start >= lo; start--) {
            int k = 0;
            while (k < n && hist[start + k] == tail[k])
                k++;
            if (k < n)
                continue;
            int cnt = 0;
            for (int i = start + n; i < n_hist && cnt < max_draft; i++)
                out[cnt++] = hist[i];
            if (cnt > 0)
                return cnt;
        }
    }
    return 0;
}
