/* memra-tune: the setting labels and the files a run writes (PREFIX.csv, PREFIX.json, PREFIX.svg). No shared
 * state. The JSON is written with fprintf (its strings are escaped here); it is READ with cJSON
 * (api/api_profile.c). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/quant.h"
#include "model/gguf_synth.h"
#include "tune.h"

void tune_label(const tune_setting *s, int n_stages, char *buf, size_t cap)
{
    char cuts[96] = "";
    size_t o = 0;
    for (int k = 1; k < n_stages && o + 8 < sizeof cuts; k++)
        o += (size_t)snprintf(cuts + o, sizeof cuts - o, "%s%d", k > 1 ? "," : "", s->fence[k]);
    snprintf(buf, cap, "cuts=%s(%s) overlap=%d graph=%d slots=%d mb=%d rows=%d", s->cut_name, cuts, s->overlap,
             s->graph, s->slots, s->micro_batches, s->max_rows);
}

static const char *status_name(int st)
{
    static const char *names[] = {"measured", "skipped: budget", "failed", "same cuts as an earlier point",
                                  "skipped: the CPU backend has no graphs"};
    return st >= 0 && st <= 4 ? names[st] : "?";
}

/* s as a JSON string body: quotes, backslashes and control characters escaped. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_ints(FILE *f, const int *v, int n)
{
    fputc('[', f);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%d", i ? ", " : "", v[i]);
    fputc(']', f);
}

static int write_csv(const char *path, const tune_job *job, const tune_point *pts, int n_pts, dev_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return dev_err_set(err, MEMRA_E_IO, "-o: cannot write %s", path);
    fprintf(f, "point,cuts_name,cuts,overlap,graph,slots,micro_batches,max_rows,tok_s_median,tok_s_min,tok_s_max,"
               "spread_pct,reps,predicted_slowest_s,status\n");
    for (int i = 0; i < n_pts; i++) {
        const tune_point *p = &pts[i];
        fprintf(f, "%d,%s,\"", i, p->set.cut_name);
        for (int k = 1; k < job->n_stages; k++)
            fprintf(f, "%s%d", k > 1 ? "," : "", p->set.fence[k]);
        fprintf(f, "\",%d,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.2f,%d,%.6f,%s\n", p->set.overlap, p->set.graph, p->set.slots,
                p->set.micro_batches, p->set.max_rows, p->median, p->lo, p->hi,
                p->median > 0 ? 100.0 * (p->hi - p->lo) / p->median : 0.0, p->reps, p->predicted_s,
                status_name(p->status));
    }
    return fclose(f) ? dev_err_set(err, MEMRA_E_IO, "-o: cannot write %s", path) : 0;
}

/* "key": the traced stages of a setting, or null when they were not measured. */
static void json_busy(FILE *f, const char *key, const tune_job *job, const tune_busy *b)
{
    fprintf(f, "  \"%s\": ", key);
    if (!b->ok) {
        fprintf(f, "null,\n");
        return;
    }
    fprintf(f, "{\"trace\": ");
    json_str(f, b->trace);
    fprintf(f, ", \"window_us\": %.1f, \"stages\": [\n", b->window_us);
    for (int s = 0; s < job->n_stages; s++) {
        const tune_stage_busy *x = &b->st[s];
        fprintf(f, "    {\"stage\": %d, \"layers\": [%d, %d], \"device\": %d, \"predicted_s\": %.6f, \"walks\": %d, "
                   "\"busy_pct\": %.1f, \"bubble_pct\": %.1f}%s\n", s, x->first, x->end, job->devices[s],
                x->predicted_s, x->walks, x->busy_pct, x->bubble_pct, s + 1 < job->n_stages ? "," : "");
    }
    fprintf(f, "  ]},\n");
}

static int write_json(const char *path, const tune_job *job, const memra_model *m, const tune_costs *c,
                      const tune_point *pts, int n_pts, int best, int dflt, double ratio, const tune_busy busy[2],
                      dev_err *err)
{
    struct stat st = {0}; /* a synthetic shape has no file: file_size 0, and the shape says what it is */
    if (!job->synth && stat(job->model, &st) != 0)
        return dev_err_set(err, MEMRA_E_IO, "-m %s: cannot stat the model file", job->model);
    FILE *f = fopen(path, "w");
    if (!f)
        return dev_err_set(err, MEMRA_E_IO, "-o: cannot write %s", path);
    const tune_point *b = &pts[best];
    fprintf(f, "{\n  \"memra_tune_profile\": 1,\n  \"model\": {\"path\": ");
    json_str(f, job->model);
    fprintf(f, ", \"file_size\": %lld, \"arch\": ", (long long)st.st_size);
    json_str(f, memra_model_arch(m));
    fprintf(f, ", \"n_layer\": %d, \"n_embd\": %d, \"n_vocab\": %d", memra_model_n_layer(m),
            memra_model_n_embd(m), memra_model_n_vocab(m));
    if (job->synth) { /* what api/api_profile.c compares against a synthetic model */
        fprintf(f, ",\n            \"synthetic\": {\"name\": ");
        json_str(f, job->model);
        fprintf(f, ", \"type\": ");
        json_str(f, krn_type_name(job->synth->type));
        fprintf(f, ", \"n_head\": %d, \"n_head_kv\": %d, \"n_ff\": %d}", job->synth->n_head,
                job->synth->n_head_kv, job->synth->n_ff);
    }
    fprintf(f, "},\n");
    fprintf(f, "  \"backend\": ");
    json_str(f, job->backend);
    fprintf(f, ",\n  \"stages\": %d,\n  \"devices\": ", job->n_stages);
    json_ints(f, job->devices, job->n_stages);
    fprintf(f, ",\n  \"workload\": {\"seqs\": %d, \"prompt\": %d, \"gen\": %d},\n", job->seqs, job->prompt, job->gen);
    fprintf(f, "  \"setting\": {\"cuts\": ");
    json_ints(f, b->set.fence + 1, job->n_stages - 1);
    fprintf(f, ", \"overlap\": %d, \"graph\": %d, \"slots\": %d, \"micro_batches\": %d, \"max_rows\": %d},\n",
            b->set.overlap, b->set.graph, b->set.slots, b->set.micro_batches, b->set.max_rows);
    fprintf(f, "  \"best\": {\"label\": ");
    json_str(f, b->label);
    fprintf(f, ", \"tok_s\": %.3f, \"default_tok_s\": %.3f, \"ratio_side_by_side\": %.4f},\n", b->median,
            pts[dflt].median, ratio);
    json_busy(f, "busy", job, &busy[0]);
    json_busy(f, "busy_defaults", job, &busy[1]);
    fprintf(f, "  \"costs\": {\"decode_rows\": %d, \"prompt_rows\": %d, \"decode_steps\": %.0f, \"prompt_steps\": %.0f, "
               "\"embed_s\": %.6f, \"head_s\": %.6f, \"layer_s\": [", c->decode_rows, c->prompt_rows, c->decode_steps,
            c->prompt_steps, c->embed, c->head);
    for (int il = 0; il < c->n_layer; il++) {
        fprintf(f, "%s[", il ? ", " : "");
        for (int s = 0; s < c->n_stages; s++)
            fprintf(f, "%s%.6f", s ? ", " : "", c->layer[il * c->n_stages + s]);
        fputc(']', f);
    }
    fprintf(f, "]},\n  \"points\": [\n");
    for (int i = 0; i < n_pts; i++) {
        const tune_point *p = &pts[i];
        fprintf(f, "    {\"label\": ");
        json_str(f, p->label);
        fprintf(f, ", \"status\": ");
        json_str(f, status_name(p->status));
        fprintf(f, ", \"tok_s\": %.3f, \"min\": %.3f, \"max\": %.3f, \"reps\": %d}%s\n", p->median, p->lo, p->hi,
                p->reps, i + 1 < n_pts ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return fclose(f) ? dev_err_set(err, MEMRA_E_IO, "-o: cannot write %s", path) : 0;
}

/* A horizontal bar per measured point: tokens/s (median, the spread as a whisker), the defaults grey, the best
 * green. Plain SVG 1.1 text. */
static int write_svg(const char *path, const tune_job *job, const tune_point *pts, int n_pts, int best, int dflt,
                     dev_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return dev_err_set(err, MEMRA_E_IO, "-o: cannot write %s", path);
    double top = 0;
    int rows = 0;
    for (int i = 0; i < n_pts; i++)
        if (pts[i].status == 0) {
            top = pts[i].hi > top ? pts[i].hi : top;
            rows++;
        }
    top = top > 0 ? top * 1.1 : 1;
    const int left = 450, width = 420, rh = 24, head = 56, W = left + width + 90, H = head + rows * rh + 30;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"monospace\" font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H, W, H);
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\">memra-tune: tokens/s per setting (median, whisker = min..max)"
               "</text>\n<text x=\"10\" y=\"38\">%d stages, %d requests x (%d prompt + %d generated)</text>\n",
            job->n_stages, job->seqs, job->prompt, job->gen);
    int y = head;
    for (int i = 0; i < n_pts; i++) {
        const tune_point *p = &pts[i];
        if (p->status != 0)
            continue;
        const double w = p->median / top * width, x0 = left + p->lo / top * width, x1 = left + p->hi / top * width;
        const char *fill = i == best ? "#2e8b57" : i == dflt ? "#999999" : "#4682b4";
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 6, y + 16);
        for (const char *c = p->label; *c; c++) /* the label has no markup characters but & < > are escaped */
            fputs(*c == '&' ? "&amp;" : *c == '<' ? "&lt;" : *c == '>' ? "&gt;" : (char[2]){*c, 0}, f);
        fprintf(f, "%s</text>\n", i == dflt ? " (defaults)" : "");
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", left, y + 4, w, rh - 8, fill);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/>\n", x0, y + rh / 2, x1,
                y + rh / 2);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\">%.1f</text>\n", x1 + 6, y + 16, p->median);
        y += rh;
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n</svg>\n", left, head, left, y);
    return fclose(f) ? dev_err_set(err, MEMRA_E_IO, "-o: cannot write %s", path) : 0;
}

int tune_write(const tune_job *job, const memra_model *m, const tune_costs *c, const tune_point *pts, int n_pts,
               int best, int dflt, double ratio, const tune_busy busy[2], dev_err *err)
{
    char path[4096];
    int rc;
    snprintf(path, sizeof path, "%s.csv", job->prefix);
    if ((rc = write_csv(path, job, pts, n_pts, err)))
        return rc;
    snprintf(path, sizeof path, "%s.json", job->prefix);
    if ((rc = write_json(path, job, m, c, pts, n_pts, best, dflt, ratio, busy, err)))
        return rc;
    snprintf(path, sizeof path, "%s.svg", job->prefix);
    return write_svg(path, job, pts, n_pts, best, dflt, err);
}
