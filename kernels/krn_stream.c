/* Per-stream kernel options, kept in a dev_stream attachment (device/dev.h): batch invariance. */
#include "kernels/krn.h"

static const int krn_invariant_mark = 1; /* the attachment's value: any non-NULL pointer marks the stream */

int krn_stream_set_batch_invariant(dev_stream *s, dev_err *err)
{
    if (dev_stream_attachment(s, DEV_SLOT_KRN_INVARIANT) == &krn_invariant_mark)
        return 0;
    return dev_stream_attach(s, DEV_SLOT_KRN_INVARIANT, (void *)&krn_invariant_mark, NULL, err);
}

int krn_stream_batch_invariant(const dev_stream *s)
{
    return dev_stream_attachment(s, DEV_SLOT_KRN_INVARIANT) != NULL;
}
