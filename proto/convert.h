/*
 * convert.h - the one place where wire messages and the C structs of kernels/space.h are
 * turned into each other: Shape <-> krn_shape_t, Config <-> krn_config_t.
 *
 * Ownership: a Shape filled by wire_shape_to_msg() points at the dtype string of the
 * krn_shape_t it came from; keep that struct alive while the message is in use.
 */
#ifndef WIRE_CONVERT_H
#define WIRE_CONVERT_H

#include <stddef.h>

#include "moetune.pb-c.h"
#include "space.h"

/* Fills out from m (an empty dtype means bf16) and checks it with krn_shape_check().
 * MT_INVAL with a one-line reason in err for a missing or invalid shape. */
int wire_shape_from_msg(const Moetune__Shape *m, krn_shape_t *out, char *err, size_t errlen);

/* Initialises m and fills it from sh; m->dtype points into sh. */
void wire_shape_to_msg(const krn_shape_t *sh, Moetune__Shape *m);

/* Copies the six config fields. */
void wire_config_from_msg(const Moetune__Config *m, krn_config_t *out);

/* Initialises m and fills it from c. */
void wire_config_to_msg(const krn_config_t *c, Moetune__Config *m);

#endif
