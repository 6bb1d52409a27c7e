-- ? fence, the names ({list}): records the group's fence on its names.
UPDATE {names} SET fence = ? WHERE name IN ({list})
