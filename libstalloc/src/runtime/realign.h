/* realign.h - where a step picks a layout up again after requests the layout's step did not
 * make, or made and this step does not (realign.c). The first training step after the warm-up
 * takes the warm-up's layout, but the warm-up made the optimizer's state midway (AdamW: two
 * blocks a parameter): every request of the training step after that point sits at another
 * position of the layout than its own. The last few requests of the step, found as a run of
 * the layout's sizes, say by how much. */
#ifndef STALLOC_REALIGN_H
#define STALLOC_REALIGN_H

#include "base/internal.h"

/* Requests compared: enough that a run of them seldom recurs by chance (a model's layers do
 * repeat theirs, and then the nearest shift is taken). */
#define ST_REALIGN_RUN 8

typedef struct st_realign st_realign;

/* An index of the layout's runs of ST_REALIGN_RUN sizes (`sizes` stays the caller's, unchanged,
 * for as long as the index lives). NULL: fewer sizes than a run, or no host memory. */
st_realign* st_realign_create(const uint64_t* sizes, size_t count);
void st_realign_destroy(st_realign* r);

/* `step`: the sizes of a step's requests up to `position`, which lost the layout at `since` (its
 * first request the layout's did not match at `shift`). The shift d (position + d in the layout)
 * at which the layout's sizes are the step's last ST_REALIGN_RUN, nearest to `shift` and other
 * than it, among those that do not also hold for the ST_REALIGN_RUN requests before `since`: a
 * model's layers repeat their sizes, and a shift by whole layers matches everywhere the step's
 * sizes are a layer's (an MoE gate's routed sizes, as another layer had them), where a step
 * that left out or added requests at `since` meets the layout there only after them.
 * false: none. */
bool st_realign_find(const st_realign* r, const uint64_t* step, size_t position, size_t since, ptrdiff_t shift,
                     ptrdiff_t* out);

#endif
